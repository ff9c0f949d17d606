//! Bad profiles: each refused with a clear error, and the limits enforced.

use super::*;

fn err_of(p: &Builder) -> String {
    let e = decode(p).unwrap_err();
    assert_eq!(e.code(), "invalid_argument", "{e}");
    e.to_string()
}

#[test]
fn bad_ids_are_errors() {
    assert_eq!(
        err_of(&go_cpu().sample(&[9], &[1, 1])),
        "invalid pprof profile: sample 3 refers to missing location id 9"
    );
    assert_eq!(
        err_of(&go_cpu().location(3, 0, 0, &[(4, 1)])),
        "invalid pprof profile: location 3 refers to missing function id 4"
    );
    assert_eq!(
        err_of(&go_cpu().location(3, 0, 0, &[(0, 1)])),
        "invalid pprof profile: location 3 refers to missing function id 0"
    );
    assert_eq!(
        err_of(&go_cpu().location(3, 2, 0, &[])),
        "invalid pprof profile: location 3 refers to missing mapping id 2"
    );
    assert_eq!(
        err_of(&go_cpu().location(0, 0, 0, &[])),
        "invalid pprof profile: location at position 2 has id 0"
    );
    assert_eq!(
        err_of(&go_cpu().function(2, "dup", "")),
        "invalid pprof profile: duplicate function id 2"
    );
    assert_eq!(
        err_of(&go_cpu().location(1, 0, 0, &[])),
        "invalid pprof profile: duplicate location id 1"
    );
    assert_eq!(
        err_of(&go_cpu().mapping(0, "x", "")),
        "invalid pprof profile: mapping at position 1 has id 0"
    );
    // Sparse ids are fine (looked up by id, not position).
    let sparse = Builder::new()
        .sample_type("cpu", "nanoseconds")
        .function(1_000_000_007, "f", "")
        .location(u64::MAX, 0, 0, &[(1_000_000_007, 1)])
        .sample(&[u64::MAX], &[5]);
    assert_eq!(
        by_type(&decode(&sparse).unwrap())["process_cpu:cpu:nanoseconds::"],
        vec![(strs(&["f"]), 5, FALLBACK_MS)]
    );
}

#[test]
fn bad_strings_and_values_are_errors() {
    let mut p = go_cpu();
    p.p.function[0].name = 999;
    assert!(err_of(&p).starts_with(
        "invalid pprof profile: function 1 name refers to string index 999 but the string table has"
    ));
    let mut p = go_cpu();
    p.p.sample_type[0].unit = -1;
    assert!(err_of(&p).contains("sample_type[0].unit refers to string index -1"));
    let mut p = go_cpu();
    p.p.string_table[0] = Bytes::from_static(b"x");
    assert_eq!(
        err_of(&p),
        "invalid pprof profile: string_table[0] must be \"\", found \"x\""
    );
    assert_eq!(
        err_of(&go_cpu().sample(&[1], &[1])),
        "invalid pprof profile: sample 3 has 1 values but the profile has 2 sample types"
    );
    let mut p = go_cpu().labeled_sample(&[1], &[1, 1], &[("k", "v")]);
    p.p.sample[3].label[0].str = 1000;
    assert!(err_of(&p).contains("sample label value refers to string index 1000"));
    let mut p = go_cpu().labeled_sample(&[1], &[1, 1], &[("k", "v")]);
    p.p.sample[3].label[0].key = 1000;
    assert!(err_of(&p).contains("sample label key refers to string index 1000"));
    let p = Builder::new().sample_type("a:b", "count");
    assert_eq!(
        err_of(&p),
        "invalid pprof profile: profile type part \"a:b\" contains ':'"
    );
}

#[test]
fn invalid_utf8_in_a_used_string_is_an_error() {
    let mut p = go_cpu();
    p.p.string_table.push(Bytes::from_static(b"\xff\xfe"));
    // Unused: fine.
    assert!(decode(&p).is_ok());
    p.p.function[0].name = (p.p.string_table.len() - 1) as i64;
    assert!(err_of(&p).ends_with("is not valid UTF-8"));
}

#[test]
fn malformed_protobuf_is_an_error() {
    let err = decode_pprof(b"\x0a\xff\xff\xff", &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            IngestError::Protobuf {
                what: "pprof Profile",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "invalid_argument");
}

#[test]
fn gzip_bomb_is_refused() {
    let mut e = GzEncoder::new(Vec::new(), Compression::best());
    e.write_all(&vec![0u8; 8 << 20]).unwrap();
    let bomb = e.finish().unwrap();
    let mut o = opts();
    o.limits.max_decompressed_bytes = 1 << 20;
    let err = decode_pprof(&bomb, &o).unwrap_err();
    assert_eq!(err.code(), "payload_too_large");
    assert_eq!(
        err.to_string(),
        "decompressed body exceeds the limit max_decompressed_bytes = 1048576"
    );
}

#[test]
fn limits_are_enforced() {
    let mut o = opts();
    o.limits.max_samples_per_profile = 2;
    let err = decode_pprof(&go_cpu().bytes(), &o).unwrap_err();
    assert_eq!(
        err.to_string(),
        "samples in profile exceeds the limit max_samples_per_profile = 2"
    );
    assert_eq!(err.code(), "payload_too_large");

    let mut o = opts();
    o.limits.max_stack_depth = 2;
    let err = decode_pprof(&go_cpu().bytes(), &o).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stack of sample 0 with more than 2 frames exceeds the limit max_stack_depth = 2"
    );

    let mut o = opts();
    o.limits.max_labels_per_series = 3;
    let err = decode_pprof(&go_cpu().bytes(), &o).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("exceeds the limit max_labels_per_series = 3"),
        "{err}"
    );
}

#[test]
fn empty_input_is_an_empty_batch() {
    let b = decode_pprof(b"", &opts()).unwrap();
    assert_eq!(b.sample_count(), 0);
    assert!(b.series.is_empty());
}
