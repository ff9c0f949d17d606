//! Decoding a value of any declared type into a small tree, within a work budget.
//!
//! Constant pools and events are decoded the same way: the type's fields in order,
//! each inline, as a constant-pool index, or as a counted array. The budget (values
//! decoded, shared by a whole recording) and the nesting limit keep a hostile type
//! table from costing more than a bounded amount of time and memory.

use super::cursor::{Cursor, JString};
use super::error::JfrError;
use super::metadata::{Field, Kind, Metadata};

/// Deepest nesting of inline structs accepted (a stack frame inside a stack trace
/// inside a pool entry is three).
const MAX_VALUE_DEPTH: usize = 16;

/// A decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any integer, boolean or char; floats as their IEEE bits.
    Int(i64),
    /// An inline string (`None`: the null string).
    Str(Option<String>),
    /// A constant-pool index into the pool of type `class` (pool-encoded strings
    /// included).
    Ref {
        /// Type of the pool.
        class: u64,
        /// Key in that pool.
        key: u64,
    },
    /// A counted array.
    Array(Vec<Value>),
    /// A struct's fields in declaration order.
    Object(Vec<Value>),
}

impl Value {
    /// The integer, if this is one.
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Field `i` of an object.
    pub fn field(&self, i: Option<usize>) -> Option<&Value> {
        match self {
            Value::Object(fields) => fields.get(i?),
            _ => None,
        }
    }
}

/// Decodes values against one chunk's metadata, charging a shared budget.
pub struct Decoder<'m> {
    meta: &'m Metadata,
    budget: &'m mut u64,
    max_budget: u64,
}

impl<'m> Decoder<'m> {
    /// `budget` is decremented per value; when it runs out decoding fails.
    pub fn new(meta: &'m Metadata, budget: &'m mut u64, max_budget: u64) -> Self {
        Decoder {
            meta,
            budget,
            max_budget,
        }
    }

    /// The metadata values are decoded against.
    pub fn meta(&self) -> &'m Metadata {
        self.meta
    }

    fn charge(&mut self) -> Result<(), JfrError> {
        *self.budget = self.budget.checked_sub(1).ok_or(JfrError::Bound {
            bound: "decoded values",
            max: self.max_budget,
        })?;
        Ok(())
    }

    /// Decodes one value of type `type_id`, stored inline.
    pub fn value(&mut self, c: &mut Cursor<'_>, type_id: u64) -> Result<Value, JfrError> {
        self.inline(c, type_id, 0)
    }

    fn inline(
        &mut self,
        c: &mut Cursor<'_>,
        type_id: u64,
        depth: usize,
    ) -> Result<Value, JfrError> {
        if depth > MAX_VALUE_DEPTH {
            return Err(JfrError::Bound {
                bound: "value nesting depth",
                max: MAX_VALUE_DEPTH as u64,
            });
        }
        self.charge()?;
        let class = self.meta.class(type_id)?;
        Ok(match class.kind {
            Kind::Byte => Value::Int(i64::from(c.u8("byte")?)),
            Kind::Int(w) => Value::Int(c.int(w, "integer")? as i64),
            Kind::Float(w) => Value::Int(c.float_bits(w, "float")? as i64),
            Kind::String => match c.string("string")? {
                JString::Pool(key) => Value::Ref {
                    class: type_id,
                    key,
                },
                s => Value::Str(s.literal()),
            },
            Kind::Struct => {
                let mut fields = Vec::with_capacity(class.fields.len());
                for f in &class.fields {
                    fields.push(self.field(c, f, depth)?);
                }
                Value::Object(fields)
            }
        })
    }

    fn field(&mut self, c: &mut Cursor<'_>, f: &Field, depth: usize) -> Result<Value, JfrError> {
        if !f.array {
            return self.single(c, f, depth);
        }
        let n = c.count(1, "array length")?;
        let mut items = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            items.push(self.single(c, f, depth)?);
        }
        Ok(Value::Array(items))
    }

    fn single(&mut self, c: &mut Cursor<'_>, f: &Field, depth: usize) -> Result<Value, JfrError> {
        if f.constant_pool {
            self.charge()?;
            Ok(Value::Ref {
                class: f.type_id,
                key: c.long("constant pool index")?,
            })
        } else {
            self.inline(c, f.type_id, depth + 1)
        }
    }
}
