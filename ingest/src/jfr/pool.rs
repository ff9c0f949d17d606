//! A chunk's constant pools: the checkpoint events holding threads, stack traces,
//! methods, classes and symbols that events refer to by index, and the lookups the
//! conversion needs (a stack trace as frames, a method's display name).

use std::collections::HashMap;

use super::chunk::HEADER_SIZE;
use super::cursor::Cursor;
use super::error::JfrError;
use super::metadata::Metadata;
use super::symbols::merge_generated;
use super::value::{Decoder, Value};

/// Most checkpoint events followed from one chunk; real chunks have one to a few
/// hundred, and the cap also ends a cycle of offsets.
const MAX_CHECKPOINTS: usize = 100_000;

/// One frame of a stack trace, leaf first as JFR stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Key of the frame's method in the `jdk.types.Method` pool.
    pub method: u64,
    /// Source line (0 when unknown).
    pub line: i64,
}

/// Every constant of one chunk, by pool type and key.
#[derive(Default)]
pub struct Pools {
    entries: HashMap<(u64, u64), Value>,
}

impl Pools {
    /// Follows the checkpoint chain from `pos` (the header's constant-pool offset).
    pub fn parse(
        chunk: &[u8],
        mut pos: usize,
        compressed: bool,
        dec: &mut Decoder<'_>,
    ) -> Result<Pools, JfrError> {
        let mut pools = Pools::default();
        for _ in 0..MAX_CHECKPOINTS {
            let mut c = Cursor::new(chunk, pos, compressed);
            let _size = c.int(4, "checkpoint size")?;
            let kind = c.long("checkpoint type")?;
            if kind != 1 {
                return Err(JfrError::malformed(format!(
                    "the constant pool offset {pos} points at an event of type {kind}, not 1"
                )));
            }
            c.long("checkpoint start")?;
            c.long("checkpoint duration")?;
            let delta = c.long("checkpoint delta")? as i64;
            c.u8("checkpoint flags")?;
            let n_pools = c.count(1, "constant pool count")?;
            for _ in 0..n_pools {
                let class = c.long("constant pool type")?;
                // The JDK stores its chunk header as raw bytes in a pool of its own.
                let raw_header = dec.meta().class(class)?.name == "jdk.types.ChunkHeader";
                let count = c.count(1, "constant count")?;
                for _ in 0..count {
                    let key = c.long("constant key")?;
                    if raw_header {
                        c.bytes(HEADER_SIZE, "chunk header constant")?;
                        continue;
                    }
                    let value = dec.value(&mut c, class)?;
                    pools.entries.insert((class, key), value);
                }
            }
            if delta == 0 {
                return Ok(pools);
            }
            pos = i64::try_from(pos)
                .ok()
                .and_then(|p| p.checked_add(delta))
                .and_then(|p| usize::try_from(p).ok())
                .filter(|&p| p < chunk.len())
                .ok_or_else(|| {
                    JfrError::malformed(format!(
                        "checkpoint at {pos} links to offset {delta} outside the chunk"
                    ))
                })?;
        }
        Err(JfrError::Bound {
            bound: "checkpoints per chunk",
            max: MAX_CHECKPOINTS as u64,
        })
    }

    fn get(&self, class: u64, key: u64) -> Option<&Value> {
        self.entries.get(&(class, key))
    }

    /// Follows a reference field to its constant, or returns an inline value as is.
    fn deref<'v>(&'v self, v: &'v Value) -> Option<&'v Value> {
        match v {
            Value::Ref { class, key } => self.get(*class, *key),
            other => Some(other),
        }
    }

    /// A string field's text, whether inline or pool-encoded.
    pub fn text(&self, v: &Value) -> Option<String> {
        match self.deref(v)? {
            Value::Str(s) => s.clone(),
            _ => None,
        }
    }

    /// Field `name` of the object a value is or refers to.
    pub fn field<'v>(&'v self, meta: &Metadata, v: &'v Value, name: &str) -> Option<&'v Value> {
        let (class, obj) = match v {
            Value::Ref { class, key } => (*class, self.get(*class, *key)?),
            _ => return None,
        };
        obj.field(meta.class(class).ok()?.field_index(name))
    }

    /// The frames of stack trace `key` in class `class`, or `None` if absent.
    pub fn stack(&self, meta: &Metadata, class: u64, key: u64) -> Option<Vec<Frame>> {
        let trace_class = meta.class(class).ok()?;
        let trace = self.get(class, key)?;
        let frames_field = trace_class.field_index("frames");
        let frame_type = trace_class.fields.get(frames_field?)?.type_id;
        let frame_class = meta.class(frame_type).ok()?;
        let (method_i, line_i) = (
            frame_class.field_index("method"),
            frame_class.field_index("lineNumber"),
        );
        let Some(Value::Array(frames)) = trace.field(frames_field) else {
            return None;
        };
        Some(
            frames
                .iter()
                .filter_map(|f| {
                    let method = match f.field(method_i)? {
                        Value::Ref { key, .. } => *key,
                        _ => return None,
                    };
                    let line = f.field(line_i).and_then(Value::int).unwrap_or(0);
                    Some(Frame { method, line })
                })
                .collect(),
        )
    }

    /// `class.method` for a method key (class names keep JFR's `/` separators, as
    /// Pyroscope shows them), or `None` when the method or its class is missing.
    pub fn method_name(&self, meta: &Metadata, method_class: u64, key: u64) -> Option<String> {
        let method = Value::Ref {
            class: method_class,
            key,
        };
        let symbol = |v: &Value| {
            let text = self.field(meta, v, "string").and_then(|s| self.text(s))?;
            Some(merge_generated(&text).into_owned())
        };
        let name = symbol(self.field(meta, &method, "name")?).unwrap_or_default();
        let class = self.field(meta, &method, "type")?;
        let class_name = symbol(self.field(meta, class, "name")?).unwrap_or_default();
        Some(format!("{class_name}.{name}"))
    }
}
