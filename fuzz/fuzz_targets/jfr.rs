//! Any bytes given to the JFR decoder, as a recording and split into a recording
//! and a labels snapshot, must either fail with an error or produce a batch whose
//! every index is valid. Small limits keep iterations fast.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_jfr, JfrOptions, Limits};

fuzz_target!(|data: &[u8]| {
    let opts = JfrOptions {
        sample_rate: Some(100),
        limits: Limits {
            max_decompressed_bytes: 4 << 20,
            max_samples_per_profile: 100_000,
            ..Limits::default()
        },
        ..JfrOptions::default()
    };
    let check = |r: Result<profiledb_model::Batch, _>| {
        if let Ok(batch) = r {
            assert_eq!(batch.validate(), Ok(()));
            assert!(batch
                .series
                .iter()
                .all(|s| s.samples.iter().all(|x| x.value != 0)));
        }
    };
    check(decode_jfr(data, None, &opts));
    // The first byte says where the labels part ends.
    if let Some((&n, rest)) = data.split_first() {
        let (labels, jfr) = rest.split_at((n as usize).min(rest.len()));
        check(decode_jfr(jfr, Some(labels), &opts));
    }
});
