//! `profiledb doctor`: checks what a server would run on before it runs there: a
//! data directory (present, writable, room for the WAL) and a bucket (reachable,
//! writable, conditional writes honoured, clock in step). It prints one line per
//! check and exits non-zero when one fails.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use profiledb_storage::{lease_key, Bucket, BucketConfig};

use super::serve::cluster::bucket_config;
use crate::memory::{default_total, MemoryPlan};

/// Clock skew against the store past which leases and grace periods misjudge
/// time: half the default lease of 120 s.
const SKEW_FAIL: Duration = Duration::from_secs(60);
/// Skew worth a warning: a machine whose clock is not kept in step.
const SKEW_WARN: Duration = Duration::from_secs(5);
/// Room a WAL file rotation takes besides the WAL's bound.
const WAL_FILE_MAX: u64 = 64 << 20;

#[derive(clap::Args, Clone, Debug)]
pub struct DoctorArgs {
    /// Data directory to check (default ./data unless --storage is given alone).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Bucket to check: s3://bucket/prefix, with AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY from the environment, as `serve --storage` reads them.
    #[arg(long, value_name = "URL")]
    pub storage: Option<String>,
    /// S3 endpoint for non-AWS stores (default: AWS_ENDPOINT_URL or AWS).
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION or us-east-1).
    #[arg(long)]
    pub s3_region: Option<String>,
    /// The server's --memory-mb, for the WAL budget (default: half the machine's
    /// memory, as serve's).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// The server's --head-max-mb, which bounds the WAL (default: 25% of
    /// --memory-mb).
    #[arg(long)]
    pub head_max_mb: Option<u64>,
}

/// Some checks failed (they are printed); `profiledb doctor` exits with 1.
#[derive(Debug, thiserror::Error)]
#[error("{0} check(s) failed")]
pub struct ChecksFailed(pub usize);

/// The outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One check and what it found.
#[derive(Clone, Debug)]
pub struct Finding {
    pub verdict: Verdict,
    pub check: &'static str,
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match self.verdict {
            Verdict::Ok => "ok",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        };
        write!(f, "  {v:<5} {:<18} {}", self.check, self.detail)
    }
}

fn finding(verdict: Verdict, check: &'static str, detail: impl Into<String>) -> Finding {
    Finding {
        verdict,
        check,
        detail: detail.into(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl DoctorArgs {
    /// The WAL's bound in bytes: the head budget.
    fn head_budget(&self) -> u64 {
        match self.head_max_mb {
            Some(mb) => mb << 20,
            None => {
                MemoryPlan::split(self.memory_mb.map_or_else(default_total, |mb| mb << 20)).head
            }
        }
    }

    pub fn run(&self) -> anyhow::Result<()> {
        let mut failed = 0;
        let mut report = |title: String, findings: Vec<Finding>| {
            println!("{title}");
            for f in &findings {
                println!("{f}");
            }
            failed += findings
                .iter()
                .filter(|f| f.verdict == Verdict::Fail)
                .count();
        };
        let dir = match (&self.data_dir, &self.storage) {
            (Some(d), _) => Some(d.clone()),
            (None, None) => Some(PathBuf::from("./data")),
            (None, Some(_)) => None,
        };
        if let Some(dir) = dir {
            let findings = check_dir(&dir, self.head_budget());
            report(format!("data directory {}", dir.display()), findings);
        }
        if let Some(url) = &self.storage {
            let cfg = bucket_config(url, self.s3_endpoint.as_deref(), self.s3_region.as_deref());
            report(format!("bucket {url}"), check_bucket(&cfg));
        }
        if failed > 0 {
            return Err(ChecksFailed(failed).into());
        }
        println!("all checks passed");
        Ok(())
    }
}

/// Bytes of the regular files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Bytes free to an unprivileged user on the filesystem holding `path`.
fn free_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `s` a buffer statvfs fills.
    if unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `s`.
    let s = unsafe { s.assume_init() };
    // The field types' widths differ between platforms.
    #[allow(clippy::unnecessary_cast)]
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Checks a data directory: present, writable (a probe file written, synced
/// and removed), and free disk against the WAL's bound.
pub fn check_dir(dir: &Path, head_budget: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    // Where the server would write: the directory, or the nearest existing
    // parent it would be created in.
    let existing = if dir.is_dir() {
        let wal = dir_bytes(&dir.join("wal"));
        let segments = std::fs::read_dir(dir.join("segments"))
            .map(|r| r.count())
            .unwrap_or(0);
        out.push(finding(
            Verdict::Ok,
            "exists",
            format!("{segments} segment files, WAL {}", mib(wal)),
        ));
        dir.to_path_buf()
    } else if dir.exists() {
        out.push(finding(Verdict::Fail, "exists", "it is not a directory"));
        return out;
    } else {
        let parent = dir
            .ancestors()
            .skip(1)
            .find(|p| p.is_dir())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        out.push(finding(
            Verdict::Warn,
            "exists",
            format!("missing; serve creates it in {}", parent.display()),
        ));
        parent
    };
    let probe = existing.join(format!(".profiledb-doctor-{}", std::process::id()));
    let written = std::fs::File::create(&probe).and_then(|mut f| {
        f.write_all(b"profiledb doctor probe\n")?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    out.push(match written {
        Ok(()) => finding(
            Verdict::Ok,
            "writable",
            "a probe file was written, synced and removed",
        ),
        Err(e) => finding(
            Verdict::Fail,
            "writable",
            format!("{}: {e}", existing.display()),
        ),
    });
    // The WAL stays under about 1.25 head budgets plus one file being rotated.
    let need = head_budget + head_budget / 4 + WAL_FILE_MAX.min(head_budget / 4);
    out.push(match free_bytes(&existing) {
        Ok(free) if free < need => finding(
            Verdict::Fail,
            "free disk",
            format!(
                "{} free, the WAL alone may take {} (1.25 x head budget {})",
                mib(free),
                mib(need),
                mib(head_budget)
            ),
        ),
        Ok(free) if free < 2 * need => finding(
            Verdict::Warn,
            "free disk",
            format!(
                "{} free: the WAL may take {}, little room for segments",
                mib(free),
                mib(need)
            ),
        ),
        Ok(free) => finding(
            Verdict::Ok,
            "free disk",
            format!("{} free, the WAL may take {}", mib(free), mib(need)),
        ),
        Err(e) => finding(Verdict::Fail, "free disk", format!("statvfs: {e}")),
    });
    out
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Checks a bucket with a probe object under `doctor/` (removed afterwards):
/// LIST, PUT, GET back, conditional create over an existing object and
/// conditional replace of a stale version (both must be refused), clock skew
/// from the store's Last-Modified of the probe, DELETE.
pub fn check_bucket(cfg: &BucketConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    let bucket = match Bucket::open(cfg) {
        Ok(b) => b,
        Err(e) => return vec![finding(Verdict::Fail, "configuration", e.to_string())],
    };
    match bucket.list("doctor/") {
        Ok(_) => out.push(finding(Verdict::Ok, "reachable", bucket.describe())),
        Err(e) => {
            out.push(finding(Verdict::Fail, "reachable", e.to_string()));
            return out;
        }
    }
    let key = format!("doctor/probe-{}-{}", std::process::id(), now_ms());
    let body = Bytes::from(format!("profiledb doctor probe {key}\n"));
    let before = now_ms();
    let put = bucket.put_if_absent(&key, body.clone());
    let after = now_ms();
    match put {
        Ok(true) => {}
        Ok(false) => {
            out.push(finding(
                Verdict::Fail,
                "write",
                format!("{key} already exists"),
            ));
            return out;
        }
        Err(e) => {
            out.push(finding(Verdict::Fail, "write", e.to_string()));
            return out;
        }
    }
    out.push(match bucket.get(&key) {
        Ok(b) if b == body => finding(
            Verdict::Ok,
            "write, read",
            format!("{key} written and read back"),
        ),
        Ok(_) => finding(Verdict::Fail, "write, read", "the probe read back differs"),
        Err(e) => finding(Verdict::Fail, "write, read", e.to_string()),
    });
    out.push(match bucket.put_if_absent(&key, Bytes::from_static(b"second\n")) {
        Ok(false) => finding(
            Verdict::Ok,
            "conditional create",
            "a create over an existing object was refused (If-None-Match)",
        ),
        Ok(true) => finding(
            Verdict::Fail,
            "conditional create",
            "a create over an existing object replaced it: the bucket index needs If-None-Match",
        ),
        Err(e) => finding(Verdict::Fail, "conditional create", e.to_string()),
    });
    out.push(check_if_match(&bucket));
    out.push(match bucket.head(&key) {
        Ok(info) => skew_finding(info.last_modified_ms, before, after),
        Err(e) => finding(Verdict::Fail, "clock skew", e.to_string()),
    });
    out.push(match bucket.delete(&key) {
        Ok(()) => finding(Verdict::Ok, "delete", "the probe was deleted"),
        Err(e) => finding(Verdict::Fail, "delete", e.to_string()),
    });
    out
}

/// A replace of a stale version must be refused: a lease taken, its object
/// then overwritten, and the lease's renewal (If-Match on the old version) must
/// lose.
fn check_if_match(bucket: &Bucket) -> Finding {
    const CHECK: &str = "conditional replace";
    let name = format!("doctor-{}-{}", std::process::id(), now_ms());
    let ttl = Duration::from_secs(60);
    let result = (|| {
        let Some(mut lease) = bucket.try_lease(&name, "doctor", ttl, now_ms())? else {
            return Ok(finding(
                Verdict::Fail,
                CHECK,
                format!("lease {name} was held already"),
            ));
        };
        bucket.put(&lease_key(&name), Bytes::from_static(b"{}"))?;
        let renewed = bucket.renew_lease(&mut lease, ttl, now_ms())?;
        bucket.delete(&lease_key(&name))?;
        Ok::<_, profiledb_storage::BucketError>(if renewed {
            finding(
                Verdict::Fail,
                CHECK,
                "a replace of a stale version succeeded: the store ignores If-Match",
            )
        } else {
            finding(
                Verdict::Ok,
                CHECK,
                "a replace of a stale version was refused (If-Match)",
            )
        })
    })();
    result.unwrap_or_else(|e| finding(Verdict::Fail, CHECK, e.to_string()))
}

/// The store's clock against ours: its Last-Modified (whole seconds) of an
/// object written between `before` and `after` on our clock.
fn skew_finding(store_ms: i64, before: i64, after: i64) -> Finding {
    // Last-Modified is truncated to the second: the write happened somewhere
    // in [store_ms, store_ms + 1000).
    let skew_ms = if store_ms + 1000 < before {
        store_ms + 1000 - before
    } else if store_ms > after {
        store_ms - after
    } else {
        0
    };
    let skew = Duration::from_millis(skew_ms.unsigned_abs());
    let detail = format!(
        "{:+.1} s (the store's Last-Modified of the probe against this machine's clock)",
        skew_ms as f64 / 1000.0
    );
    let verdict = if skew > SKEW_FAIL {
        Verdict::Fail
    } else if skew > SKEW_WARN {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    finding(verdict, "clock skew", detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_measured_outside_the_second_last_modified_rounds_to() {
        let at = 1_000_000;
        assert_eq!(skew_finding(at, at + 500, at + 600).verdict, Verdict::Ok);
        let slow = skew_finding(at - 62_000, at, at + 10);
        assert_eq!(slow.verdict, Verdict::Fail, "{slow}");
        assert!(slow.detail.starts_with("-61.0 s"), "{slow}");
        assert_eq!(skew_finding(at + 10_000, at, at).verdict, Verdict::Warn);
    }
}
