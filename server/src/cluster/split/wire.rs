//! What travels between queriers for one part of a split query
//! (`POST /internal/v1/partial`), and how a part is answered: the same
//! function answers a peer's part and this querier's own share, so the two
//! cannot differ.

use profiledb_storage::{
    GroupAcc, GroupByQuery, GroupKey, NamedTree, Querier, Selector, SeriesPoints, SourceSpan,
    TenantId, TimeRange,
};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The path peers are asked on (routed in `endpoint.rs`).
pub const PARTIAL_PATH: &str = "/internal/v1/partial";

/// Header carrying the asking querier's node id: a querier never answers a part
/// it asked itself (a peer list may name every querier, this one too).
pub const FROM_HEADER: &str = "X-Profiledb-Split-From";

/// What a part computes. Selectors travel as text (`Selector`'s display form
/// parses back to the same matchers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PartKind {
    /// A merge, answered as a tree of frame names.
    Merge {
        selector: String,
    },
    /// A group-by's rows and total.
    GroupBy {
        selector: String,
        keys: Vec<String>,
        include: Option<String>,
        exclude: Option<String>,
        max_groups: usize,
    },
    /// Time series, every group (the limit applies to the sum of the parts).
    Series {
        selector: String,
        group_by: Vec<String>,
        step_ms: i64,
    },
    LabelNames {
        selector: String,
    },
    LabelValues {
        selector: String,
        name: String,
    },
}

/// One part: a kind over a sub-range, for a tenant, with the sources the asking
/// querier saw there. A peer whose view of the bucket index differs (it synced
/// at another generation: a merge swapped in, a segment added) refuses the part
/// rather than answer over other sources.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartRequest {
    pub tenant: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub expect: Vec<SourceSpan>,
    #[serde(flatten)]
    pub kind: PartKind,
}

/// A part's answer (struct variants: an internally tagged enum cannot hold a
/// bare sequence).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PartAnswer {
    Merge(NamedTree),
    GroupBy {
        rows: Vec<(Vec<String>, i64)>,
        total: i64,
    },
    Series {
        series: Vec<SeriesPart>,
    },
    Strings {
        values: Vec<String>,
    },
}

/// One series of a time-series part: its group's label pairs and its
/// `(bucket start ms, value)` points.
pub type SeriesPart = (Vec<(String, String)>, Vec<(i64, i64)>);

/// The answer envelope: the tenant it was computed for, checked by the asker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartReply {
    pub tenant: String,
    pub answer: PartAnswer,
}

fn selector(s: &str) -> Result<Selector, ApiError> {
    Selector::parse(s).map_err(|e| ApiError::bad_request(format!("part selector: {e}")))
}

fn regex(s: &Option<String>) -> Result<Option<regex::Regex>, ApiError> {
    s.as_deref()
        .map(|r| {
            regex::RegexBuilder::new(r)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| ApiError::bad_request(format!("part regex: {e}")))
        })
        .transpose()
}

impl PartKind {
    /// The group-by part of `q` over `sel`.
    pub fn group_by(sel: &Selector, q: &GroupByQuery) -> Self {
        PartKind::GroupBy {
            selector: sel.to_string(),
            keys: q.keys.iter().map(|k| k.name().to_string()).collect(),
            include: q.include.as_ref().map(|r| r.as_str().to_string()),
            exclude: q.exclude.as_ref().map(|r| r.as_str().to_string()),
            max_groups: q.max_groups,
        }
    }

    /// Whether `answer` is of this kind (a peer answering another question is
    /// a failed part).
    pub fn expects(&self, answer: &PartAnswer) -> bool {
        matches!(
            (self, answer),
            (PartKind::Merge { .. }, PartAnswer::Merge(_))
                | (PartKind::GroupBy { .. }, PartAnswer::GroupBy { .. })
                | (PartKind::Series { .. }, PartAnswer::Series { .. })
                | (PartKind::LabelNames { .. }, PartAnswer::Strings { .. })
                | (PartKind::LabelValues { .. }, PartAnswer::Strings { .. })
        )
    }
}

/// Computes `kind` over `range` on this querier.
pub fn answer(
    querier: &Querier,
    tenant: &TenantId,
    range: TimeRange,
    kind: &PartKind,
) -> Result<PartAnswer, ApiError> {
    Ok(match kind {
        PartKind::Merge { selector: s } => {
            PartAnswer::Merge(querier.merge_named(tenant, &selector(s)?, range)?)
        }
        PartKind::GroupBy {
            selector: s,
            keys,
            include,
            exclude,
            max_groups,
        } => {
            let q = GroupByQuery {
                keys: keys.iter().map(|k| GroupKey::parse(k)).collect(),
                include: regex(include)?,
                exclude: regex(exclude)?,
                max_groups: *max_groups,
            };
            let acc = querier.group_by(tenant, &selector(s)?, range, &q)?;
            PartAnswer::GroupBy {
                rows: acc.rows.into_iter().collect(),
                total: acc.total,
            }
        }
        PartKind::Series {
            selector: s,
            group_by,
            step_ms,
        } => PartAnswer::Series {
            series: querier
                .time_series(tenant, &selector(s)?, range, group_by, *step_ms, 0)?
                .into_iter()
                .map(|p| (p.labels, p.points))
                .collect(),
        },
        PartKind::LabelNames { selector: s } => PartAnswer::Strings {
            values: querier.label_names(tenant, &selector(s)?, range)?,
        },
        PartKind::LabelValues { selector: s, name } => PartAnswer::Strings {
            values: querier.label_values(tenant, name, &selector(s)?, range)?,
        },
    })
}

impl PartAnswer {
    /// The merge tree, for a merge part.
    pub fn into_tree(self) -> Option<NamedTree> {
        match self {
            PartAnswer::Merge(t) => Some(t),
            _ => None,
        }
    }

    /// Adds a group-by part into `acc`.
    pub fn add_groups(self, acc: &mut GroupAcc) {
        if let PartAnswer::GroupBy { rows, total } = self {
            acc.merge(&GroupAcc {
                rows: rows.into_iter().collect(),
                total,
            });
        }
    }

    /// A time-series part's series.
    pub fn into_series(self) -> Vec<SeriesPoints> {
        match self {
            PartAnswer::Series { series } => series
                .into_iter()
                .map(|(labels, points)| SeriesPoints { labels, points })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A label part's names or values.
    pub fn into_strings(self) -> Vec<String> {
        match self {
            PartAnswer::Strings { values } => values,
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer survives its trip as JSON, and is recognised as the kind asked.
    #[test]
    fn answers_round_trip_through_json() {
        let sel = "{}".to_string();
        let cases = [
            (
                PartKind::Merge {
                    selector: sel.clone(),
                },
                PartAnswer::Merge(NamedTree {
                    parents: vec![0, 0],
                    names: vec![String::new(), "main".into()],
                    values: vec![0, 3],
                }),
            ),
            (
                PartKind::group_by(&Selector::default(), &GroupByQuery::default()),
                PartAnswer::GroupBy {
                    rows: vec![(vec!["a".into()], 2)],
                    total: 2,
                },
            ),
            (
                PartKind::Series {
                    selector: sel.clone(),
                    group_by: vec!["service_name".into()],
                    step_ms: 10,
                },
                PartAnswer::Series {
                    series: vec![(vec![("service_name".into(), "a".into())], vec![(0, 1)])],
                },
            ),
            (
                PartKind::LabelNames { selector: sel },
                PartAnswer::Strings {
                    values: vec!["host".into()],
                },
            ),
        ];
        for (kind, answer) in cases {
            let reply = PartReply {
                tenant: "t".into(),
                answer,
            };
            let back: PartReply =
                serde_json::from_slice(&serde_json::to_vec(&reply).unwrap()).unwrap();
            assert!(kind.expects(&back.answer), "{kind:?}");
            assert_eq!(format!("{:?}", back.answer), format!("{:?}", reply.answer));
        }
    }

    #[test]
    fn a_selector_parses_back_from_its_text() {
        let s =
            Selector::parse(r#"cpu:x:y:z:w{service_name="a\"b", host=~"h[12]", x!=""}"#).unwrap();
        assert_eq!(Selector::parse(&s.to_string()).unwrap(), s);
    }
}
