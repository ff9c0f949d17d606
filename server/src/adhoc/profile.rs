//! An uploaded file as call trees: decoded by the same decoders `/ingest` uses,
//! then summed per profile type into the trees every flame graph, function table
//! and diff of stored data is rendered from.

use profiledb_ingest::{IngestParams, Limits};
use profiledb_storage::symbolize::{MappingRange, Symbolizer};
use profiledb_storage::{Batch, CallTree, TenantId};
use rustc_hash::FxHashMap;

use crate::error::ApiError;
use crate::pipeline::{decode, Job, Payload};

/// One profile type of an upload.
pub struct TypedTree {
    /// `name:sample_type:sample_unit:period_type:period_unit`, as stored series have.
    pub profile_type: String,
    /// Finalized (totals computed).
    pub tree: CallTree,
    /// Samples of the file that went into it.
    pub samples: u64,
}

/// An upload: one tree per profile type, in the order the file has them.
pub struct AdhocProfile {
    pub types: Vec<TypedTree>,
}

impl AdhocProfile {
    /// Decodes `body` as `/ingest` would with `params` (format detected unless
    /// named), naming frames kept as addresses with `symbols` when given.
    pub fn decode(
        body: bytes::Bytes,
        params: IngestParams,
        tenant: TenantId,
        limits: &Limits,
        symbols: Option<&Symbolizer>,
    ) -> Result<AdhocProfile, ApiError> {
        let job = Job {
            tenant,
            payload: Payload::Raw { params, body },
            received_ms: profiledb_storage::now_ms(),
        };
        let (batch, _) = decode(&job, limits)?;
        let types = trees(&batch, symbols);
        if types.iter().all(|t| t.samples == 0) {
            return Err(ApiError::bad_request(
                "the file decoded to no samples: nothing to show",
            ));
        }
        Ok(AdhocProfile { types })
    }

    /// The tree of `profile_type`, or when none is named the first whose sample
    /// type is `cpu` (else the first); a named type the file lacks is a 400 listing those it has.
    pub fn pick(&self, profile_type: Option<&str>) -> Result<&TypedTree, ApiError> {
        match profile_type.filter(|t| !t.is_empty()) {
            Some(want) => self
                .types
                .iter()
                .find(|t| t.profile_type == want)
                .ok_or_else(|| {
                    let have: Vec<&str> =
                        self.types.iter().map(|t| t.profile_type.as_str()).collect();
                    ApiError::bad_request(format!(
                        "the profile has no type {want:?}; it has {have:?}"
                    ))
                }),
            None => self
                .types
                .iter()
                .find(|t| t.profile_type.split(':').nth(1) == Some("cpu"))
                .or(self.types.first())
                .ok_or_else(|| ApiError::bad_request("the profile holds no profile type")),
        }
    }

    /// Approximate bytes held: per node its record and its child-map entry, per
    /// distinct name the text twice (list and lookup map) and their headers.
    pub fn heap_bytes(&self) -> u64 {
        let per_node = std::mem::size_of::<profiledb_storage::TreeNode>() + 24;
        self.types
            .iter()
            .map(|t| {
                let nodes = t.tree.nodes();
                let names = nodes.iter().map(|n| n.name as usize + 1).max().unwrap_or(0);
                let text: usize = (0..names).map(|i| t.tree.name(i as u32).len()).sum();
                (nodes.len() * per_node + 2 * text + names * 64) as u64
            })
            .sum()
    }
}

/// The batch's samples summed per profile type, each stack's node found once.
fn trees(batch: &Batch, symbols: Option<&Symbolizer>) -> Vec<TypedTree> {
    let mut frames: Vec<Option<Vec<String>>> = vec![None; batch.symbols.locations.len()];
    let mut out: Vec<(TypedTree, FxHashMap<u32, u32>)> = Vec::new();
    for series in &batch.series {
        let pt = series.labels.profile_type().unwrap_or_default();
        let at = match out.iter().position(|(t, _)| t.profile_type == pt) {
            Some(i) => i,
            None => {
                out.push((
                    TypedTree {
                        profile_type: pt.to_string(),
                        tree: CallTree::new(),
                        samples: 0,
                    },
                    FxHashMap::default(),
                ));
                out.len() - 1
            }
        };
        let (t, nodes) = &mut out[at];
        for s in &series.samples {
            let node = match nodes.get(&s.stack) {
                Some(&n) => n,
                None => {
                    let n = stack_node(&mut t.tree, batch, s.stack, &mut frames, symbols);
                    nodes.insert(s.stack, n);
                    n
                }
            };
            t.tree.add_self(node, s.value);
            t.samples += 1;
        }
    }
    out.into_iter()
        .map(|(mut t, _)| {
            t.tree.finalize();
            t
        })
        .collect()
}

/// The node of stack `stack` in `tree`, added with its path if new.
fn stack_node(
    tree: &mut CallTree,
    batch: &Batch,
    stack: u32,
    frames: &mut [Option<Vec<String>>],
    symbols: Option<&Symbolizer>,
) -> u32 {
    let mut node = 0;
    for &loc in batch.stacks.get(stack).unwrap_or_default() {
        let Some(slot) = frames.get_mut(loc as usize) else {
            continue;
        };
        let names = slot.get_or_insert_with(|| location_names(batch, loc, symbols));
        for name in names.iter() {
            let id = tree.intern(name);
            node = tree.child(node, id);
        }
    }
    node
}

/// What stored data names a location (see the store's `location_frames`): its
/// function, else what the debug file of its build id says (inlined calls
/// expanded, outermost first), else `module+0xoffset`, else the address.
fn location_names(batch: &Batch, loc: u32, symbols: Option<&Symbolizer>) -> Vec<String> {
    let syms = &batch.symbols;
    let Some(l) = syms.locations.get(loc as usize) else {
        return vec!["[unknown]".into()];
    };
    if let Some(f) = l.function.and_then(|f| syms.functions.get(f as usize)) {
        if !f.name.is_empty() {
            return vec![f.name.to_string()];
        }
    }
    let mapping = l.mapping.and_then(|m| syms.mappings.get(m as usize));
    if let (Some(sym), Some(m)) = (symbols, mapping) {
        let range = MappingRange {
            start: m.start,
            limit: m.limit,
            offset: m.offset,
        };
        let found = (!m.build_id.is_empty())
            .then(|| sym.frames(&m.build_id, range, l.address))
            .flatten()
            .filter(|f| !f.is_empty());
        if let Some(found) = found {
            return found
                .into_iter()
                .map(|f| match f.function.is_empty() {
                    true => format!("{}+0x{:x}", m.base_name(), m.file_offset(l.address)),
                    false => f.function,
                })
                .collect();
        }
    }
    match (mapping, l.address) {
        (Some(m), _) if !m.base_name().is_empty() => {
            vec![format!(
                "{}+0x{:x}",
                m.base_name(),
                m.file_offset(l.address)
            )]
        }
        (_, 0) => vec!["[unknown]".into()],
        (_, a) => vec![format!("0x{a:x}")],
    }
}
