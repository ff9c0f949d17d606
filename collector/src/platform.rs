//! The machine's platform: CPU vendor and microarchitecture from `/proc/cpuinfo`.
//!
//! The fleet analyses compare cycles per instruction across platforms
//! (`/api/v1/fleet/cpi`), so every hardware-event series carries a `platform` label
//! such as `intel/skylake` or `amd/zen3`. Unknown models keep their numbers
//! (`intel/family-6-model-0xaf`) rather than being guessed.

/// What `/proc/cpuinfo` says about the first CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuInfo {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub model_name: String,
}

/// Parses the first processor block of `/proc/cpuinfo`.
pub fn parse_cpuinfo(text: &str) -> Option<CpuInfo> {
    let mut info = CpuInfo::default();
    let mut seen = 0;
    for line in text.lines() {
        if line.trim().is_empty() && seen > 0 {
            break;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "vendor_id" => info.vendor = v.to_string(),
            "cpu family" => info.family = v.parse().ok()?,
            "model" => info.model = v.parse().ok()?,
            "model name" => info.model_name = v.to_string(),
            _ => continue,
        }
        seen += 1;
    }
    (seen > 0 && !info.vendor.is_empty()).then_some(info)
}

/// `vendor/microarchitecture` of a CPU.
pub fn platform_of(cpu: &CpuInfo) -> String {
    let (vendor, arch) = match cpu.vendor.as_str() {
        "GenuineIntel" => ("intel", intel(cpu.family, cpu.model)),
        "AuthenticAMD" => ("amd", amd(cpu.family, cpu.model)),
        other => (other, None),
    };
    let vendor = if vendor.is_empty() { "unknown" } else { vendor };
    match arch {
        Some(a) => format!("{}/{a}", vendor.to_ascii_lowercase()),
        None => format!(
            "{}/family-{}-model-{:#x}",
            vendor.to_ascii_lowercase(),
            cpu.family,
            cpu.model
        ),
    }
}

fn intel(family: u32, model: u32) -> Option<&'static str> {
    if family != 6 {
        return None;
    }
    Some(match model {
        0x3c | 0x45 | 0x46 => "haswell",
        0x3f => "haswell-server",
        0x3d | 0x47 => "broadwell",
        0x4f | 0x56 => "broadwell-server",
        0x4e | 0x5e => "skylake",
        0x55 => "skylake-server",
        0x8e | 0x9e => "kabylake",
        0xa5 | 0xa6 => "cometlake",
        0x6a | 0x6c => "icelake-server",
        0x7d | 0x7e => "icelake",
        0x8c | 0x8d => "tigerlake",
        0x97 | 0x9a => "alderlake",
        0xb7 | 0xba | 0xbf => "raptorlake",
        0x8f => "sapphirerapids",
        0xcf => "emeraldrapids",
        0xad | 0xae => "graniterapids",
        _ => return None,
    })
}

fn amd(family: u32, model: u32) -> Option<&'static str> {
    Some(match (family, model) {
        (0x17, 0x00..=0x2f) => "zen",
        (0x17, _) => "zen2",
        (0x19, 0x00..=0x0f) | (0x19, 0x20..=0x5f) => "zen3",
        (0x19, _) => "zen4",
        (0x1a, _) => "zen5",
        _ => return None,
    })
}

/// This machine's platform, or `None` when `/proc/cpuinfo` says nothing useful.
pub fn detect() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpuinfo(&text).map(|c| platform_of(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_models() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\
                    model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n\nprocessor\t: 1\n";
        let c = parse_cpuinfo(text).expect("parses");
        assert_eq!(c.model, 85);
        assert_eq!(platform_of(&c), "intel/skylake-server");
        let amd = CpuInfo {
            vendor: "AuthenticAMD".into(),
            family: 0x19,
            model: 0x11,
            ..Default::default()
        };
        assert_eq!(platform_of(&amd), "amd/zen4");
        let odd = CpuInfo {
            vendor: "GenuineIntel".into(),
            family: 6,
            model: 0xfe,
            ..Default::default()
        };
        assert_eq!(platform_of(&odd), "intel/family-6-model-0xfe");
        assert_eq!(parse_cpuinfo(""), None);
        if let Some(p) = detect() {
            assert!(p.contains('/'), "{p}");
        }
    }
}
