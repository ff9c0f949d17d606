//! The Pyroscope Java agent's `labels` part: a `LabelsSnapshot` protobuf (plain or
//! gzip'd) mapping each context id that samples carry to label pairs, through a
//! string table shared by names and values.

use std::collections::HashMap;

use super::error::JfrError;

/// One context: label name id → value id (both keys of [`LabelsSnapshot::strings`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Context {
    /// Name id → value id.
    #[prost(map = "int64, int64", tag = "1")]
    pub labels: HashMap<i64, i64>,
}

/// Context id → labels, as the agent snapshots them with each upload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelsSnapshot {
    /// Context id → its labels.
    #[prost(map = "int64, message", tag = "1")]
    pub contexts: HashMap<i64, Context>,
    /// String id → text.
    #[prost(map = "int64, string", tag = "2")]
    pub strings: HashMap<i64, String>,
}

impl LabelsSnapshot {
    /// Decodes an already decompressed snapshot.
    pub fn decode_bytes(data: &[u8]) -> Result<LabelsSnapshot, JfrError> {
        <LabelsSnapshot as prost::Message>::decode(data)
            .map_err(|e| JfrError::Labels(e.to_string()))
    }

    /// The label pairs of context `id`, sorted by name; pairs whose ids are not in
    /// the string table are skipped, as the agent never sends them.
    pub fn context(&self, id: u64) -> Vec<(&str, &str)> {
        let Some(ctx) = i64::try_from(id).ok().and_then(|id| self.contexts.get(&id)) else {
            return Vec::new();
        };
        let mut pairs: Vec<(&str, &str)> = ctx
            .labels
            .iter()
            .filter_map(|(k, v)| {
                Some((self.strings.get(k)?.as_str(), self.strings.get(v)?.as_str()))
            })
            .collect();
        pairs.sort_unstable();
        pairs
    }
}
