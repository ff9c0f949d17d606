//! Kernel symbols from `/proc/kallsyms`, in a compact index.
//!
//! The file has over a hundred thousand text symbols. A general-purpose resolver keeps
//! one heap string and enum per symbol (the largest part of the agent's anonymous
//! memory); here only text symbols are kept, as one sorted `(address, name offset)`
//! array and one string buffer, under half of that (docs/perf-log/2026-11-22-agent.md).
//! Reading the file costs tens of ms of kernel time (it is generated on every
//! read), so it is read once,
//! lazily, on the first kernel frame.

use std::io::{BufRead, BufReader};

/// Sorted text symbols of the running kernel.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// (address, offset of the name in `names`), sorted by address.
    syms: Vec<(u64, u32)>,
    /// Names, each followed by a NUL-free boundary given by the next offset.
    names: String,
    ends: Vec<u32>,
}

impl KernelSymbols {
    /// Parses kallsyms-format text: `address type name [module]`, text symbols only
    /// (`t`, `T`, `w`, `W`); all-zero addresses (hidden by kptr_restrict) are skipped.
    pub fn parse(r: impl std::io::Read) -> Self {
        let mut s = Self::default();
        let mut order: Vec<(u64, u32, u32)> = Vec::new();
        let mut line = String::new();
        let mut reader = BufReader::new(r);
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            let mut it = line.split_ascii_whitespace();
            if let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) {
                if matches!(t, "t" | "T" | "w" | "W") {
                    if let Ok(addr) = u64::from_str_radix(a, 16) {
                        let start = u32::try_from(s.names.len()).unwrap_or(u32::MAX);
                        if addr != 0 && start != u32::MAX {
                            s.names.push_str(name);
                            let end = u32::try_from(s.names.len()).unwrap_or(u32::MAX);
                            order.push((addr, start, end));
                        }
                    }
                }
            }
            line.clear();
        }
        order.sort_unstable_by_key(|&(a, _, _)| a);
        s.syms = order.iter().map(|&(a, n, _)| (a, n)).collect();
        s.ends = order.iter().map(|&(_, _, e)| e).collect();
        s.names.shrink_to_fit();
        s
    }

    /// Loads `/proc/kallsyms`.
    pub fn load() -> std::io::Result<Self> {
        Ok(Self::parse(std::fs::File::open("/proc/kallsyms")?))
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol at or below `addr` (kallsyms has no sizes: the nearest start).
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self
            .syms
            .partition_point(|&(a, _)| a <= addr)
            .checked_sub(1)?;
        let (_, start) = self.syms[i];
        let end = *self.ends.get(i)?;
        self.names.get(start as usize..end as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_text_symbol_below() {
        let text = "\
ffffffff81000000 T _stext
ffffffff81000100 t helper
ffffffff81000050 D some_data
0000000000000000 T hidden
ffffffffc0000000 t mod_fn\t[ext4]
";
        let k = KernelSymbols::parse(text.as_bytes());
        assert_eq!(k.len(), 3, "data and zero-address symbols skipped");
        assert_eq!(k.lookup(0xffff_ffff_8100_0000), Some("_stext"));
        assert_eq!(k.lookup(0xffff_ffff_8100_00ff), Some("_stext"));
        assert_eq!(k.lookup(0xffff_ffff_8100_0150), Some("helper"));
        assert_eq!(k.lookup(0xffff_ffff_c000_0010), Some("mod_fn"));
        assert_eq!(k.lookup(0x1000), None);
    }
}
