//! Byte-string equality that never asks libc to compare zero bytes.
//!
//! Rust compares byte slices with one `memcmp` (or `bcmp`) call of their length,
//! zero included, and an empty `String` or slice points at a dangling address
//! (`0x1`). glibc's AVX-512 `memcmp` answers a zero-length call with a masked load
//! from that address, all lanes masked off; on some machines (AMD EPYC in a VM)
//! that load takes a microcode assist, far slower than a real compare (`bench
//! memtouch` measures it; figures in
//! docs/perf-log/2026-11-27-round-20-empty-memcmp-batches-freed.md). The ingest
//! path compares empty file names once per function of every profile. Hot
//! comparisons that can meet empty strings go through [`eq`].

/// `a == b`, with no libc call when either is empty.
#[inline]
pub(crate) fn eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

#[cfg(test)]
mod tests {
    use super::eq;

    #[test]
    fn equal_only_when_the_bytes_are() {
        assert!(eq(b"", b""));
        assert!(eq(b"", &String::new().into_bytes()));
        assert!(eq(b"abc", b"abc"));
        assert!(!eq(b"abc", b"abd"));
        assert!(!eq(b"abc", b"ab"));
        assert!(!eq(b"", b"a"));
        assert!(!eq(b"a", b""));
    }
}
