//! Folded (collapsed) stacks and the `lines` format → [`Batch`].
//!
//! Folded: one `root;…;leaf COUNT` per line. The count is after the **last** space,
//! because frames may contain spaces, commas, `<>`, `::` and forms like
//! `file.rs:12 - function`. Frames are split at `;` and kept verbatim (an empty frame
//! between `;;` stays an empty frame, as in Pyroscope).
//! - Counts must be non-negative integers; a fractional count (`1.5`) or anything else
//!   is an error naming the line. A count of 0 is skipped.
//! - Blank (whitespace-only) lines are skipped; a trailing `\r` is ignored.
//! - Invalid UTF-8 is an error naming the line.
//!
//! Lines: one `root;…;leaf` per line, each counting 1.
//!
//! The batch has one series: the caller's labels plus `__name__` and
//! `__profile_type__`, values = count scaled by [`ValueScale`] (CPU uploads:
//! count × 1e9 / sampleRate nanoseconds).

use std::collections::HashMap;

use profiledb_model::{
    Batch, Function, Labels, Location, Name, Sample, SeriesSamples, TenantId, NAME_LABEL,
    PROFILE_TYPE_LABEL,
};

use crate::error::IngestError;
use crate::gzip::decompress_body;
use crate::label_rules::check_series_labels;
use crate::limits::Limits;
use crate::profile_type::ProfileType;

/// Which text format the body is in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FoldedFormat {
    /// `a;b;c 12`
    #[default]
    Folded,
    /// `a;b;c` (count 1)
    Lines,
}

/// value = round(count × numerator / denominator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueScale {
    /// Multiplies the count.
    pub numerator: i64,
    /// Divides the product (treated as at least 1).
    pub denominator: i64,
}

impl ValueScale {
    /// Values are the counts as sent.
    pub const IDENTITY: ValueScale = ValueScale {
        numerator: 1,
        denominator: 1,
    };

    /// Samples taken at `sample_rate` Hz, stored as nanoseconds.
    pub fn samples_to_nanos(sample_rate: u32) -> ValueScale {
        ValueScale {
            numerator: 1_000_000_000,
            denominator: i64::from(sample_rate.max(1)),
        }
    }

    /// Rounds half away from zero; saturates instead of overflowing.
    pub fn apply(&self, count: u64) -> i64 {
        let den = i128::from(self.denominator.max(1));
        let scaled = i128::from(count) * i128::from(self.numerator);
        let rounded = (scaled + den / 2) / den;
        i64::try_from(rounded).unwrap_or(i64::MAX)
    }
}

impl Default for ValueScale {
    fn default() -> Self {
        ValueScale::IDENTITY
    }
}

/// What the caller knows about a folded/lines upload besides its bytes.
#[derive(Clone, Debug)]
pub struct FoldedOptions {
    /// Whose data it is.
    pub tenant: TenantId,
    /// Folded or lines.
    pub format: FoldedFormat,
    /// Labels of the series (`service_name`, tags); `__name__` and
    /// `__profile_type__` are set from `profile_type`.
    pub labels: Labels,
    /// The profile type every sample gets.
    pub profile_type: ProfileType,
    /// Converts each line's count into the stored value.
    pub scale: ValueScale,
    /// Timestamp of every sample (the request's `from`), ms.
    pub time_ms: i64,
    /// Bounds on the body and its stacks and labels.
    pub limits: Limits,
}

impl Default for FoldedOptions {
    fn default() -> Self {
        FoldedOptions {
            tenant: TenantId::default(),
            format: FoldedFormat::Folded,
            labels: Labels::default(),
            profile_type: crate::profile_type::default_suffix_type().profile_type,
            scale: ValueScale::samples_to_nanos(100),
            time_ms: 0,
            limits: Limits::default(),
        }
    }
}

/// Decodes a folded or lines body (gzip-framed or plain) into a new batch.
pub fn decode_folded(data: &[u8], opts: &FoldedOptions) -> Result<Batch, IngestError> {
    let limits = &opts.limits;
    let bytes = decompress_body(data, limits)?;

    let mut labels = opts.labels.clone();
    labels.set(NAME_LABEL, opts.profile_type.name.as_str());
    labels.set(PROFILE_TYPE_LABEL, opts.profile_type.id());
    check_series_labels(&labels, limits)?;

    let mut batch = Batch::new(opts.tenant.clone());
    let mut samples = Vec::new();
    // Frame text → location index; stack text → stack index. Keys borrow the body,
    // so repeated frames and stacks cost a hash lookup, not an allocation.
    let mut frames: HashMap<&str, u32> = HashMap::new();
    let mut stacks: HashMap<&str, u32> = HashMap::new();
    let mut path: Vec<u32> = Vec::new();
    let mut lines_seen = 0usize;

    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        lines_seen += 1;
        limits.check_samples(lines_seen, "lines in folded body")?;
        let bad = |reason: String| IngestError::InvalidFolded {
            line: line_no,
            reason,
        };
        let line = std::str::from_utf8(raw).map_err(|e| bad(format!("invalid UTF-8 ({e})")))?;
        let (stack_text, count) = match opts.format {
            FoldedFormat::Lines => (line, 1),
            FoldedFormat::Folded => {
                let (stack, count) = line
                    .rsplit_once(' ')
                    .ok_or_else(|| bad("missing count after the last space".to_string()))?;
                (stack, parse_count(count).map_err(bad)?)
            }
        };
        if stack_text.is_empty() {
            return Err(bad("empty stack".to_string()));
        }
        if count == 0 {
            continue;
        }
        let value = opts.scale.apply(count);
        if value == 0 {
            continue;
        }
        let stack = match stacks.get(stack_text) {
            Some(&s) => s,
            None => {
                path.clear();
                for frame in stack_text.split(';') {
                    if path.len() == limits.max_stack_depth {
                        return Err(IngestError::LimitExceeded {
                            limit: "max_stack_depth",
                            max: limits.max_stack_depth as u64,
                            detail: format!("stack at line {line_no}"),
                        });
                    }
                    let loc = match frames.get(frame) {
                        Some(&l) => l,
                        None => {
                            let l = intern_frame(&mut batch, frame)?;
                            frames.insert(frame, l);
                            l
                        }
                    };
                    path.push(loc);
                }
                let s = batch.stacks.push(&path);
                stacks.insert(stack_text, s);
                s
            }
        };
        samples.push(Sample {
            timestamp_ms: opts.time_ms,
            stack,
            value,
        });
    }
    if !samples.is_empty() {
        batch.series.push(SeriesSamples { labels, samples });
    }
    Ok(batch)
}

/// Adds a function and a frame for `name`; returns the frame's index.
fn intern_frame(batch: &mut Batch, name: &str) -> Result<u32, IngestError> {
    let too_many = || IngestError::profile("too many distinct frames");
    let function = u32::try_from(batch.symbols.functions.len()).map_err(|_| too_many())?;
    let location = u32::try_from(batch.symbols.locations.len()).map_err(|_| too_many())?;
    batch.symbols.functions.push(Function {
        name: name.into(),
        file: Name::new(),
    });
    batch.symbols.locations.push(Location {
        function: Some(function),
        ..Location::default()
    });
    Ok(location)
}

fn parse_count(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err("missing count after the last space".to_string());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map_err(|_| format!("count {s:?} is too large"));
    }
    if s.contains('.') && s.parse::<f64>().is_ok() {
        return Err(format!(
            "count {s:?} is not a non-negative integer (fractional counts are not supported)"
        ));
    }
    Err(format!("count {s:?} is not a non-negative integer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn opts(format: FoldedFormat, scale: ValueScale) -> FoldedOptions {
        FoldedOptions {
            format,
            scale,
            labels: Labels::new([("service_name", "app")]),
            time_ms: 1_700_000_000_000,
            ..FoldedOptions::default()
        }
    }

    /// (frames root first joined by ';', value) per sample.
    fn flatten(b: &Batch) -> Vec<(String, i64)> {
        assert_eq!(b.validate(), Ok(()));
        let mut out = Vec::new();
        for s in &b.series {
            for x in &s.samples {
                let names = b.frame_names(x.stack).unwrap();
                out.push((names.join(";"), x.value));
            }
        }
        out
    }

    #[test]
    fn folded_with_awkward_frames_and_cpu_scaling() {
        let body = "main;std::vec::Vec<T>::push 3\n\
                    \n\
                    src/lib.rs:12 - handle request, retry;a b c 2\r\n\
                    main;idle 0\n   \n";
        let b = decode_folded(
            body.as_bytes(),
            &opts(FoldedFormat::Folded, ValueScale::samples_to_nanos(100)),
        )
        .unwrap();
        assert_eq!(
            flatten(&b),
            vec![
                ("main;std::vec::Vec<T>::push".to_string(), 30_000_000),
                (
                    "src/lib.rs:12 - handle request, retry;a b c".to_string(),
                    20_000_000
                ),
            ]
        );
        assert_eq!(b.series.len(), 1);
        let l = &b.series[0].labels;
        assert_eq!(l.get("service_name"), Some("app"));
        assert_eq!(l.get(NAME_LABEL), Some("process_cpu"));
        assert_eq!(
            l.profile_type(),
            Some("process_cpu:cpu:nanoseconds:cpu:nanoseconds")
        );
        assert!(b.series[0]
            .samples
            .iter()
            .all(|s| s.timestamp_ms == 1_700_000_000_000));
        // "main" is interned once.
        assert_eq!(b.symbols.functions.len(), 4);
    }

    #[test]
    fn lines_format_counts_one_per_line() {
        let b = decode_folded(
            b"a;b\na;b\nc\n",
            &opts(FoldedFormat::Lines, ValueScale::IDENTITY),
        )
        .unwrap();
        assert_eq!(
            flatten(&b),
            vec![("a;b".into(), 1), ("a;b".into(), 1), ("c".into(), 1)]
        );
        assert_eq!(b.stacks.len(), 2);
    }

    #[test]
    fn bad_lines_are_reported_by_number() {
        let o = opts(FoldedFormat::Folded, ValueScale::IDENTITY);
        let err = decode_folded(b"a;b 1\na;c 1.5\n", &o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid folded input at line 2: count \"1.5\" is not a non-negative integer \
             (fractional counts are not supported)"
        );
        assert_eq!(err.code(), "invalid_argument");
        let err = decode_folded(b"\n\nabc\n", &o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid folded input at line 3: missing count after the last space"
        );
        let err = decode_folded(b"a -1\n", &o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid folded input at line 1: count \"-1\" is not a non-negative integer"
        );
        let err = decode_folded(b"a;\xff 1\n", &o).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid folded input at line 1: invalid UTF-8"),
            "{err}"
        );
        let err = decode_folded(b" 4\n", &o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid folded input at line 1: empty stack"
        );
    }

    #[test]
    fn limits_are_enforced() {
        let mut o = opts(FoldedFormat::Folded, ValueScale::IDENTITY);
        o.limits.max_stack_depth = 2;
        let err = decode_folded(b"a;b 1\na;b;c 1\n", &o).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stack at line 2 exceeds the limit max_stack_depth = 2"
        );
        o.limits.max_samples_per_profile = 1;
        let err = decode_folded(b"a 1\n\nb 1\n", &o).unwrap_err();
        assert_eq!(err.code(), "payload_too_large");
    }

    #[test]
    fn scale_rounds_and_saturates() {
        assert_eq!(ValueScale::samples_to_nanos(100).apply(3), 30_000_000);
        assert_eq!(ValueScale::samples_to_nanos(3).apply(1), 333_333_333);
        assert_eq!(ValueScale::samples_to_nanos(3).apply(2), 666_666_667);
        assert_eq!(ValueScale::samples_to_nanos(0).apply(1), 1_000_000_000);
        assert_eq!(ValueScale::samples_to_nanos(1).apply(u64::MAX), i64::MAX);
    }

    fn frame() -> impl Strategy<Value = String> {
        // Anything but the separators: ';' splits frames and '\n' splits lines.
        "[a-zA-Z0-9 _.,:<>()/\\-]{1,12}"
    }

    proptest! {
        #[test]
        fn folded_round_trip(
            stacks in prop::collection::vec(
                (prop::collection::vec(frame(), 1..6), 0u64..1_000_000),
                0..40,
            )
        ) {
            let mut body = String::new();
            for (frames, count) in &stacks {
                body.push_str(&frames.join(";"));
                body.push(' ');
                body.push_str(&count.to_string());
                body.push('\n');
            }
            let b = decode_folded(
                body.as_bytes(),
                &opts(FoldedFormat::Folded, ValueScale::IDENTITY),
            )
            .unwrap();
            let expected: Vec<(String, i64)> = stacks
                .iter()
                .filter(|(_, c)| *c > 0)
                .map(|(f, c)| (f.join(";"), *c as i64))
                .collect();
            prop_assert_eq!(flatten(&b), expected);
        }
    }
}
