//! Corrupt and hostile recordings: every truncation and single-byte corruption fails cleanly, counts and work are bounded.

use super::*;

#[test]
fn every_truncation_fails_cleanly() {
    let data = recording(&[setting("event", "cpu"), ev(EXECUTION, &[1, 1, 0])]);
    for n in 0..data.len() {
        if decode_jfr(&data[..n], None, &options()).is_ok() {
            // Only the empty prefix is an (empty) recording.
            assert_eq!(n, 0);
        }
    }
    let mut bad = data.clone();
    bad[0] = b'X';
    let err = decode_jfr(&bad, None, &options()).unwrap_err();
    assert!(matches!(
        err,
        IngestError::InvalidJfr(JfrError::BadMagic { at: 0 })
    ));
    let mut v1 = data.clone();
    v1[5] = 1;
    let err = decode_jfr(&v1, None, &options()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid JFR recording: unsupported JFR version 1.0"
    );
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let data = recording(&[
        setting("event", "wall"),
        ev(EXECUTION, &[1, 1, 0]),
        ev(IN_TLAB, &[1, 24, 4096, 0]),
    ]);
    for i in 0..data.len() {
        for x in [0x00, 0x7f, 0x80, 0xff] {
            let mut d = data.clone();
            d[i] = x;
            // Any answer but a panic or a hang.
            let _ = decode_jfr(&d, None, &options());
        }
    }
}

#[test]
fn hostile_counts_and_work_are_bounded() {
    // An array claiming 2^28 frames in a tiny pool.
    let mut data = recording(&[ev(EXECUTION, &[1, 1, 0])]);
    let cp_at = u64::from_be_bytes(data[16..24].try_into().unwrap()) as usize;
    let frames_count = data[cp_at..]
        .windows(3)
        .position(|w| w == [0, 2, 2])
        .map(|p| cp_at + p + 1)
        .unwrap();
    data.splice(
        frames_count..frames_count + 1,
        [0x80, 0x80, 0x80, 0x80, 0x01],
    );
    let err = decode_jfr(&data, None, &options()).unwrap_err();
    assert!(matches!(err, IngestError::InvalidJfr(_)), "{err:?}");

    // A constant pool count far above what the checkpoint's bytes could hold.
    let mut data = recording(&[]);
    let cp_at = u64::from_be_bytes(data[16..24].try_into().unwrap()) as usize;
    let count_at = cp_at + 4 + 4 + 1; // padded size, four one-byte varints, flags
    assert_eq!(data[count_at], 7);
    data.splice(count_at..count_at + 1, [0xff, 0xff, 0xff, 0x7f]);
    let err = decode_jfr(&data, None, &options()).unwrap_err();
    assert!(
        matches!(err, IngestError::InvalidJfr(JfrError::Malformed(ref m)) if m.contains("constant pool count")),
        "{err:?}"
    );
}

#[test]
fn raw_body_without_format_is_detected() {
    assert!(is_jfr(&recording(&[])));
    assert!(!is_jfr(b"main;work 1"));
}
