//! Any bytes given to the pprof decoder must either fail with an error or produce a
//! batch whose every index is valid. Small limits keep iterations fast.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_pprof, Limits, PprofOptions};

fuzz_target!(|data: &[u8]| {
    let opts = PprofOptions {
        limits: Limits {
            max_decompressed_bytes: 4 << 20,
            max_samples_per_profile: 100_000,
            ..Limits::default()
        },
        ..PprofOptions::default()
    };
    if let Ok(batch) = decode_pprof(data, &opts) {
        assert_eq!(batch.validate(), Ok(()));
        assert!(batch
            .series
            .iter()
            .all(|s| s.samples.iter().all(|x| x.value != 0)));
    }
});
