//! The `/ingest` query parameters Pyroscope SDKs send, parsed into [`IngestParams`],
//! plus helpers that turn them into decoder options.
//!
//! - `name=app.cpu{k=v,k2=v2}`: the part before `{` is the app name; for folded/lines
//!   a known profile suffix (`.cpu`, `.alloc_space`, … see
//!   [`crate::profile_type::suffix_profile_type`]) is stripped from it to give
//!   `service_name`, for pprof the app name is used whole. Tags are `k=v` pairs
//!   separated by commas, values unquoted (surrounding double quotes are tolerated and
//!   removed); names must be valid label names and not reserved (`__*`).
//! - `from`/`until`: unix time in s/ms/µs/ns chosen by digit count (≤10 s, ≤13 ms,
//!   ≤16 µs, else ns), or `now`, `now-1h`, `now-30m`, `now-15s`, `now-2d`, `now-1w`.
//! - `format`: `folded` (default) | `lines` | `pprof` | `jfr`.
//! - `sampleRate` (default 100, must be > 0), `spyName`, `units`, `aggregationType`.
//!
//! Unknown parameters are ignored, as Pyroscope does.

use profiledb_model::{Batch, Labels, TenantId, SERVICE_NAME_LABEL};

use crate::error::IngestError;
use crate::folded::{decode_folded, FoldedFormat, FoldedOptions, ValueScale};
use crate::jfr::{decode_jfr, is_jfr, JfrOptions};
use crate::label_rules::{check_label_name, is_reserved};
use crate::limits::Limits;
use crate::pprof::{decode_pprof, PprofOptions};
use crate::profile_type::{
    default_suffix_type, parse_sample_type_config, suffix_profile_type, SampleTypeConfig,
    SuffixType,
};
use crate::time::parse_time;

/// Body format named by the `format` parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Collapsed stacks, `a;b;c 12` (the default).
    #[default]
    Folded,
    /// One stack per line, repeated once per sample.
    Lines,
    /// A pprof profile.
    Pprof,
    /// Java Flight Recorder.
    Jfr,
}

impl Format {
    /// The format a `format` parameter names; `trie`, `tree` and `speedscope` are
    /// refused as unsupported.
    pub fn parse(s: &str) -> Result<Format, IngestError> {
        match s {
            "" | "folded" => Ok(Format::Folded),
            "lines" => Ok(Format::Lines),
            "pprof" => Ok(Format::Pprof),
            "jfr" => Ok(Format::Jfr),
            // Pyroscope's old trie/tree formats are real formats we do not decode.
            "trie" | "tree" | "speedscope" => Err(IngestError::UnsupportedFormat {
                format: s.to_string(),
            }),
            other => Err(IngestError::param(
                "format",
                format!("unknown format {other:?} (expected folded, lines, pprof or jfr)"),
            )),
        }
    }
}

/// The parsed `name` parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppName {
    /// Everything before `{`, unchanged (`myapp.cpu`): a pprof upload's service name.
    pub app: String,
    /// `app` without a known profile suffix (`myapp`): a folded upload's service name.
    pub stripped: String,
    /// Profile type picked by the suffix (CPU when there is no known suffix).
    pub suffix_type: SuffixType,
    /// Tags from `{…}`.
    pub tags: Labels,
}

impl AppName {
    /// Parses `app.suffix{k=v,…}`.
    pub fn parse(name: &str, limits: &Limits) -> Result<AppName, IngestError> {
        let bad = |reason: String| IngestError::param("name", reason);
        let (app, tags_text) = match name.find('{') {
            Some(i) => {
                let rest = name.get(i + 1..).unwrap_or_default();
                let inner = rest
                    .strip_suffix('}')
                    .ok_or_else(|| bad(format!("{name:?} has '{{' without a closing '}}'")))?;
                (name.get(..i).unwrap_or_default(), Some(inner))
            }
            None => (name, None),
        };
        let app = app.trim();
        if app.is_empty() {
            return Err(bad("the application name is empty".to_string()));
        }
        if let Some(c) = app
            .chars()
            .find(|c| c.is_control() || "{}=,\"".contains(*c))
        {
            return Err(bad(format!("application name {app:?} contains {c:?}")));
        }
        if app.len() > limits.max_label_value_len {
            return Err(IngestError::LimitExceeded {
                limit: "max_label_value_len",
                max: limits.max_label_value_len as u64,
                detail: format!("application name of {} bytes", app.len()),
            });
        }
        let (stripped, suffix_type) = match app
            .rsplit_once('.')
            .and_then(|(base, suffix)| Some((base, suffix_profile_type(suffix)?)))
        {
            Some((base, t)) if !base.is_empty() => (base, t),
            _ => (app, default_suffix_type()),
        };
        let mut pairs = Vec::new();
        for part in tags_text.unwrap_or_default().split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("tag {part:?} is not key=value")))?;
            let k = k.trim();
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            check_label_name(k, limits)?;
            if is_reserved(k) || k == SERVICE_NAME_LABEL {
                return Err(IngestError::InvalidLabel {
                    name: k.to_string(),
                    reason: "reserved label name".to_string(),
                });
            }
            pairs.push((k.to_string(), v.to_string()));
        }
        Ok(AppName {
            app: app.to_string(),
            stripped: stripped.to_string(),
            suffix_type,
            tags: Labels::new(pairs),
        })
    }
}

/// Everything the `/ingest` query string says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngestParams {
    /// The `name` parameter.
    pub name: AppName,
    /// `from`, ms since the epoch.
    pub from_ms: Option<i64>,
    /// `until`, ms since the epoch.
    pub until_ms: Option<i64>,
    /// `None` when the parameter is absent: a multipart body then means pprof.
    pub format: Option<Format>,
    /// `sampleRate` in Hz, when the upload names one (formats that need one use
    /// [`IngestParams::DEFAULT_SAMPLE_RATE`] otherwise).
    pub sample_rate: Option<u32>,
    /// `spyName`: the SDK's profiler.
    pub spy_name: Option<String>,
    /// `units`, as sent.
    pub units: Option<String>,
    /// `aggregationType`, as sent.
    pub aggregation_type: Option<String>,
}

impl IngestParams {
    /// Pyroscope SDKs sample at 100 Hz unless told otherwise.
    pub const DEFAULT_SAMPLE_RATE: u32 = 100;

    /// Parses already percent-decoded query pairs. `now_ms` anchors `now-…` times.
    pub fn from_pairs<K, V>(
        pairs: impl IntoIterator<Item = (K, V)>,
        now_ms: i64,
        limits: &Limits,
    ) -> Result<IngestParams, IngestError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut name = None;
        let mut p = IngestParams {
            name: AppName {
                app: String::new(),
                stripped: String::new(),
                suffix_type: default_suffix_type(),
                tags: Labels::default(),
            },
            from_ms: None,
            until_ms: None,
            format: None,
            sample_rate: None,
            spy_name: None,
            units: None,
            aggregation_type: None,
        };
        let non_empty = |v: &str| (!v.is_empty()).then(|| v.to_string());
        for (k, v) in pairs {
            let v = v.as_ref();
            match k.as_ref() {
                "name" => name = Some(AppName::parse(v, limits)?),
                "from" => p.from_ms = Some(parse_time("from", v, now_ms)?),
                "until" => p.until_ms = Some(parse_time("until", v, now_ms)?),
                "format" => p.format = Some(Format::parse(v)?),
                "sampleRate" => {
                    p.sample_rate = match v.trim().parse::<u32>() {
                        Ok(r) if r > 0 => Some(r),
                        _ => {
                            return Err(IngestError::param(
                                "sampleRate",
                                format!("{v:?} is not a positive integer"),
                            ))
                        }
                    }
                }
                "spyName" => p.spy_name = non_empty(v),
                "units" => p.units = non_empty(v),
                "aggregationType" => p.aggregation_type = non_empty(v),
                _ => {}
            }
        }
        p.name = name.ok_or_else(|| IngestError::param("name", "missing"))?;
        if let (Some(from), Some(until)) = (p.from_ms, p.until_ms) {
            if until < from {
                return Err(IngestError::param(
                    "until",
                    format!("{until} is before from = {from}"),
                ));
            }
        }
        Ok(p)
    }

    /// Parses a raw query string (`a=b&c=d`, percent-encoded, `+` meaning space).
    pub fn from_query(
        query: &str,
        now_ms: i64,
        limits: &Limits,
    ) -> Result<IngestParams, IngestError> {
        let mut pairs = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((decode_component(k)?, decode_component(v)?));
        }
        Self::from_pairs(pairs, now_ms, limits)
    }

    /// `sampleRate`, or the SDKs' default of 100 Hz.
    pub fn sample_rate_or_default(&self) -> u32 {
        self.sample_rate.unwrap_or(Self::DEFAULT_SAMPLE_RATE)
    }

    /// Time of the uploaded samples: `from`, else `now_ms`.
    pub fn sample_time_ms(&self, now_ms: i64) -> i64 {
        self.from_ms.unwrap_or(now_ms)
    }

    /// Options for decoding a folded or lines body.
    pub fn folded_options(
        &self,
        tenant: TenantId,
        format: FoldedFormat,
        now_ms: i64,
        limits: Limits,
    ) -> FoldedOptions {
        let mut labels = self.name.tags.clone();
        labels.set(SERVICE_NAME_LABEL, self.name.stripped.as_str());
        let scale = if self.name.suffix_type.counts_are_samples {
            ValueScale::samples_to_nanos(self.sample_rate_or_default())
        } else {
            ValueScale::IDENTITY
        };
        FoldedOptions {
            tenant,
            format,
            labels,
            profile_type: self.name.suffix_type.profile_type.clone(),
            scale,
            time_ms: self.sample_time_ms(now_ms),
            limits,
        }
    }

    /// Options for decoding a JFR body: the app name is the service name, whole,
    /// as Pyroscope's JFR path takes it.
    pub fn jfr_options(&self, tenant: TenantId, now_ms: i64, limits: Limits) -> JfrOptions {
        let mut base_labels = self.name.tags.clone();
        base_labels.set(SERVICE_NAME_LABEL, self.name.app.as_str());
        JfrOptions {
            tenant,
            base_labels,
            time_ms: self.sample_time_ms(now_ms),
            sample_rate: self.sample_rate,
            limits,
        }
    }

    /// Options for decoding a pprof body: the app name is the service name, whole.
    pub fn pprof_options(
        &self,
        tenant: TenantId,
        sample_type_config: Option<SampleTypeConfig>,
        now_ms: i64,
        limits: Limits,
    ) -> PprofOptions {
        let mut base_labels = self.name.tags.clone();
        base_labels.set(SERVICE_NAME_LABEL, self.name.app.as_str());
        PprofOptions {
            tenant,
            base_labels,
            name: None,
            fallback_time_ms: self.sample_time_ms(now_ms),
            limits,
            sample_type_config,
            sample_rate: self.sample_rate,
        }
    }
}

/// The body of an `/ingest` request, as the HTTP layer extracted it.
#[derive(Clone, Copy, Debug)]
pub enum IngestBody<'a> {
    /// The raw request body (any content type but multipart).
    Raw(&'a [u8]),
    /// `multipart/form-data`: the `profile` part (or the Java agent's `jfr` part)
    /// and the optional `sample_type_config` and `labels` parts.
    Multipart {
        /// The `profile` or `jfr` part.
        profile: &'a [u8],
        /// The `sample_type_config` part, if sent.
        sample_type_config: Option<&'a [u8]>,
        /// The Java agent's `labels` part (a `LabelsSnapshot`), if sent.
        labels: Option<&'a [u8]>,
    },
}

/// Whether a raw body (gzip'd or not) is binary rather than text: folded and lines
/// bodies are UTF-8 text whose only control characters are tab, CR and LF, while a
/// pprof's first bytes are protobuf tags and lengths. SDKs send gzip'd pprof without
/// `format=pprof`, so the body, not the parameter, decides.
fn is_binary(data: &[u8]) -> bool {
    let head = crate::gzip::peek(data, 1024);
    let text = match std::str::from_utf8(&head) {
        Ok(t) => t,
        // Cut inside a character at the peek's end: the part before is what counts.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return true,
    };
    text.bytes()
        .any(|b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
}

/// Decodes an `/ingest` request into a batch: the one call the HTTP layer needs.
///
/// Without a `format` parameter a body that starts like a JFR recording (gzip'd or
/// not) is JFR, another multipart body is pprof and a raw body is folded, as in
/// Pyroscope, unless the raw body is binary (gzip'd or plain pprof).
pub fn decode_ingest(
    params: &IngestParams,
    body: IngestBody<'_>,
    tenant: TenantId,
    now_ms: i64,
    limits: &Limits,
) -> Result<Batch, IngestError> {
    let (data, config, labels) = match body {
        IngestBody::Raw(data) => (data, None, None),
        IngestBody::Multipart {
            profile,
            sample_type_config,
            labels,
        } => (profile, sample_type_config, labels),
    };
    let format = match params.format {
        Some(f) => f,
        None if is_jfr(&crate::gzip::peek(data, 4)) => Format::Jfr,
        None if matches!(body, IngestBody::Multipart { .. }) => Format::Pprof,
        None if is_binary(data) => Format::Pprof,
        None => Format::Folded,
    };
    match format {
        Format::Jfr => decode_jfr(
            data,
            labels,
            &params.jfr_options(tenant, now_ms, limits.clone()),
        ),
        Format::Pprof => {
            let config = config.map(parse_sample_type_config).transpose()?;
            let opts = params.pprof_options(tenant, config, now_ms, limits.clone());
            decode_pprof(data, &opts)
        }
        Format::Lines => decode_folded(
            data,
            &params.folded_options(tenant, FoldedFormat::Lines, now_ms, limits.clone()),
        ),
        Format::Folded => decode_folded(
            data,
            &params.folded_options(tenant, FoldedFormat::Folded, now_ms, limits.clone()),
        ),
    }
}

fn decode_component(s: &str) -> Result<String, IngestError> {
    let plus_as_space = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus_as_space)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|e| {
            IngestError::param(
                "query",
                format!("invalid UTF-8 after percent-decoding: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_bodies_are_told_from_text() {
        let gz = |b: &[u8]| {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(b).unwrap();
            e.finish().unwrap()
        };
        // A pprof's first bytes: field 1 (sample_type), length, field 1 varint.
        let pprof_head = [0x0a, 0x04, 0x08, 0x01, 0x10, 0x02, 0x12, 0x00];
        assert!(is_binary(&pprof_head));
        assert!(is_binary(&gz(&pprof_head)));
        assert!(!is_binary(b"main;work 12\nmain;idle 3\r\n"));
        assert!(!is_binary(&gz(b"main;work 12\n")));
        assert!(!is_binary("naïve;frame\t1\n".as_bytes()));
        assert!(is_binary(&[0xff, 0xfe, 0x00]));
    }
    use profiledb_model::{NAME_LABEL, PROFILE_TYPE_LABEL};

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn name_with_suffix_and_tags() {
        let n = AppName::parse("myapp.cpu{env=prod, region=\"eu\",}", &Limits::default()).unwrap();
        assert_eq!(n.app, "myapp.cpu");
        assert_eq!(n.stripped, "myapp");
        assert_eq!(
            n.suffix_type.profile_type.id(),
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
        );
        assert_eq!(
            n.tags.iter().collect::<Vec<_>>(),
            vec![("env", "prod"), ("region", "eu")]
        );

        let n = AppName::parse("my.app", &Limits::default()).unwrap();
        assert_eq!(n.stripped, "my.app");
        assert_eq!(n.suffix_type.profile_type.name, "process_cpu");

        let n = AppName::parse("svc.alloc_space{}", &Limits::default()).unwrap();
        assert_eq!(n.stripped, "svc");
        assert_eq!(
            n.suffix_type.profile_type.id(),
            "memory:alloc_space:bytes:space:bytes"
        );
        assert!(!n.suffix_type.counts_are_samples);
    }

    #[test]
    fn bad_names_are_refused() {
        let l = Limits::default();
        for bad in [
            "",
            "{a=b}",
            "app{a=b",
            "app{a}",
            "app{1a=b}",
            "app{__name__=x}",
            "a,b",
        ] {
            assert!(AppName::parse(bad, &l).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn query_string_to_folded_options() {
        let p = IngestParams::from_query(
            "name=web.wall%7Benv%3Dprod%7D&from=now-10s&until=now&sampleRate=50&spyName=rbspy&format=lines&extra=1",
            NOW,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(p.from_ms, Some(NOW - 10_000));
        assert_eq!(p.until_ms, Some(NOW));
        assert_eq!(p.format, Some(Format::Lines));
        assert_eq!(p.spy_name.as_deref(), Some("rbspy"));
        let o = p.folded_options(
            TenantId::default(),
            FoldedFormat::Lines,
            NOW,
            Limits::default(),
        );
        assert_eq!(o.labels.get(SERVICE_NAME_LABEL), Some("web"));
        assert_eq!(o.labels.get("env"), Some("prod"));
        assert_eq!(
            o.profile_type.id(),
            "wall:wall:nanoseconds:wall:nanoseconds"
        );
        assert_eq!(o.scale, ValueScale::samples_to_nanos(50));
        assert_eq!(o.time_ms, NOW - 10_000);

        let b = crate::folded::decode_folded(b"a;b\n", &o).unwrap();
        let labels = &b.series[0].labels;
        assert_eq!(labels.get(NAME_LABEL), Some("wall"));
        assert_eq!(
            labels.get(PROFILE_TYPE_LABEL),
            Some("wall:wall:nanoseconds:wall:nanoseconds")
        );
        assert_eq!(b.series[0].samples[0].value, 20_000_000);
    }

    #[test]
    fn pprof_options_keep_the_whole_name() {
        let p = IngestParams::from_pairs(
            [("name", "api.cpu{pod=x}"), ("from", "1700000000")],
            0,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(p.format, None);
        assert_eq!(p.sample_rate_or_default(), 100);
        let o = p.pprof_options(TenantId::default(), None, 5, Limits::default());
        assert_eq!(o.base_labels.get(SERVICE_NAME_LABEL), Some("api.cpu"));
        assert_eq!(o.base_labels.get("pod"), Some("x"));
        assert_eq!(o.fallback_time_ms, NOW);
    }

    #[test]
    fn decode_ingest_picks_the_format() {
        let l = Limits::default();
        let p = IngestParams::from_pairs(
            [("name", "app.inuse_space{a=b}"), ("from", "1700000000")],
            0,
            &l,
        )
        .unwrap();
        let b = decode_ingest(&p, IngestBody::Raw(b"x;y 5\n"), TenantId::default(), 0, &l).unwrap();
        let labels = &b.series[0].labels;
        assert_eq!(
            labels.profile_type(),
            Some("memory:inuse_space:bytes:space:bytes")
        );
        assert_eq!(labels.get(SERVICE_NAME_LABEL), Some("app"));
        assert_eq!(labels.get("a"), Some("b"));
        assert_eq!(b.series[0].samples[0].value, 5);
        assert_eq!(b.series[0].samples[0].timestamp_ms, NOW);

        // Multipart without `format` is pprof; an empty profile is an empty batch.
        let body = IngestBody::Multipart {
            profile: b"",
            sample_type_config: Some(br#"{"samples":{"display-name":"cpu"}}"#),
            labels: None,
        };
        assert_eq!(
            decode_ingest(&p, body, TenantId::default(), 0, &l)
                .unwrap()
                .sample_count(),
            0
        );
        // ...so folded text sent that way is a protobuf error.
        let body = IngestBody::Multipart {
            profile: b"x;y 5",
            sample_type_config: None,
            labels: None,
        };
        let err = decode_ingest(&p, body, TenantId::default(), 0, &l).unwrap_err();
        assert!(matches!(err, IngestError::Protobuf { .. }), "{err:?}");
        let body = IngestBody::Multipart {
            profile: b"",
            sample_type_config: Some(b"{"),
            labels: None,
        };
        let err = decode_ingest(&p, body, TenantId::default(), 0, &l).unwrap_err();
        assert!(matches!(
            err,
            IngestError::InvalidJson {
                what: "sample_type_config",
                ..
            }
        ));

        let jfr = IngestParams::from_pairs([("name", "app"), ("format", "jfr")], 0, &l).unwrap();
        let err =
            decode_ingest(&jfr, IngestBody::Raw(b"FLR"), TenantId::default(), 0, &l).unwrap_err();
        assert!(matches!(err, IngestError::InvalidJfr(_)), "{err:?}");
        assert_eq!(err.code(), "invalid_argument");
    }

    #[test]
    fn parameter_errors() {
        let l = Limits::default();
        let err = IngestParams::from_pairs([("from", "1")], 0, &l).unwrap_err();
        assert_eq!(err.to_string(), "invalid parameter name: missing");
        let err =
            IngestParams::from_pairs([("name", "a"), ("sampleRate", "0")], 0, &l).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid parameter sampleRate: \"0\" is not a positive integer"
        );
        let err = IngestParams::from_pairs([("name", "a"), ("format", "trie")], 0, &l).unwrap_err();
        assert_eq!(err.code(), "unsupported_format");
        assert_eq!(err.to_string(), "format \"trie\" is not supported yet");
        let err = IngestParams::from_pairs([("name", "a"), ("format", "xml")], 0, &l).unwrap_err();
        assert_eq!(err.code(), "invalid_argument");
        let err = IngestParams::from_pairs([("name", "a"), ("from", "20"), ("until", "10")], 0, &l)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid parameter until: 10000 is before from = 20000"
        );
    }
}
