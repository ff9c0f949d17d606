//! A chunk's metadata event: the type table every other part is decoded with.
//!
//! The event holds a string table and a tree of elements (`root` → `metadata` →
//! `class` → `field`/`annotation`/`setting`). Each class has an id, a name and
//! ordered fields; a field names its type by id and says whether it is stored as a
//! constant-pool index (`constantPool="true"`) and whether it is an array
//! (`dimension="1"`).

use std::collections::HashMap;

use super::cursor::Cursor;
use super::error::JfrError;

/// Deepest element nesting accepted; real metadata is five levels deep.
const MAX_ELEMENT_DEPTH: usize = 16;

/// One field of a class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Field name (`stackTrace`, `tlabSize`, …).
    pub name: String,
    /// Id of the field's type.
    pub type_id: u64,
    /// Stored as a constant-pool index rather than inline.
    pub constant_pool: bool,
    /// An array of values (prefixed by a count).
    pub array: bool,
}

/// How a value of a type is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `boolean` or `byte`: one raw byte.
    Byte,
    /// `char`, `short`, `int` or `long`: an integer of this many bytes.
    Int(usize),
    /// `float` or `double`: big-endian IEEE bits of this many bytes.
    Float(usize),
    /// `java.lang.String`.
    String,
    /// Any other type: its fields, in order.
    Struct,
}

impl Kind {
    fn of(name: &str) -> Kind {
        match name {
            "boolean" | "byte" => Kind::Byte,
            "char" | "short" => Kind::Int(2),
            "int" => Kind::Int(4),
            "long" => Kind::Int(8),
            "float" => Kind::Float(4),
            "double" => Kind::Float(8),
            "java.lang.String" => Kind::String,
            _ => Kind::Struct,
        }
    }
}

/// One declared type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    /// Its id, as events and pools refer to it.
    pub id: u64,
    /// Its name (`jdk.ExecutionSample`, `long`, `java.lang.String`, …).
    pub name: String,
    /// How its values are stored.
    pub kind: Kind,
    /// Fields in storage order.
    pub fields: Vec<Field>,
}

impl Class {
    /// Position of a field by name.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// All classes of a chunk, by id and by name.
#[derive(Debug, Default)]
pub struct Metadata {
    classes: HashMap<u64, Class>,
    by_name: HashMap<String, u64>,
}

impl Metadata {
    /// The class with id `id`.
    pub fn class(&self, id: u64) -> Result<&Class, JfrError> {
        self.classes.get(&id).ok_or(JfrError::UnknownType(id))
    }

    /// The class named `name`, if declared.
    pub fn by_name(&self, name: &str) -> Option<&Class> {
        self.by_name.get(name).and_then(|id| self.classes.get(id))
    }

    /// Reads the metadata event at `pos` of a chunk.
    pub fn parse(chunk: &[u8], pos: usize, compressed: bool) -> Result<Metadata, JfrError> {
        let mut c = Cursor::new(chunk, pos, compressed);
        let _size = c.int(4, "metadata size")?;
        let kind = c.long("metadata event type")?;
        if kind != 0 {
            return Err(JfrError::malformed(format!(
                "the metadata offset points at an event of type {kind}, not 0"
            )));
        }
        for what in ["metadata start", "metadata duration", "metadata id"] {
            c.long(what)?;
        }
        let n = c.count(1, "metadata string count")?;
        let mut strings = Vec::with_capacity(n);
        for _ in 0..n {
            strings.push(c.string("metadata string")?.literal().unwrap_or_default());
        }
        let root = Element::parse(&mut c, &strings, 0)?;
        if root.name != "root" {
            return Err(JfrError::malformed(format!(
                "the metadata tree starts with {:?}, not \"root\"",
                root.name
            )));
        }
        let mut meta = Metadata::default();
        let class_elements = root
            .children
            .iter()
            .filter(|e| e.name == "metadata")
            .flat_map(|m| m.children.iter())
            .filter(|e| e.name == "class");
        for el in class_elements {
            let class = class_from(el)?;
            meta.by_name.insert(class.name.clone(), class.id);
            meta.classes.insert(class.id, class);
        }
        Ok(meta)
    }
}

fn class_from(el: &Element<'_>) -> Result<Class, JfrError> {
    let id = el
        .attr("id")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| JfrError::malformed("a metadata class has no numeric id"))?;
    let name = el.attr("name").unwrap_or_default().to_string();
    let mut fields = Vec::new();
    for f in el.children.iter().filter(|e| e.name == "field") {
        let type_id = f
            .attr("class")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| JfrError::malformed(format!("a field of {name:?} has no type id")))?;
        fields.push(Field {
            name: f.attr("name").unwrap_or_default().to_string(),
            type_id,
            constant_pool: f.attr("constantPool") == Some("true"),
            array: f.attr("dimension").is_some_and(|d| d != "0"),
        });
    }
    Ok(Class {
        id,
        kind: Kind::of(&name),
        name,
        fields,
    })
}

/// One node of the metadata tree, its strings borrowed from the string table.
struct Element<'s> {
    name: &'s str,
    attrs: Vec<(&'s str, &'s str)>,
    children: Vec<Element<'s>>,
}

impl<'s> Element<'s> {
    fn parse(c: &mut Cursor<'_>, strings: &'s [String], depth: usize) -> Result<Self, JfrError> {
        if depth > MAX_ELEMENT_DEPTH {
            return Err(JfrError::Bound {
                bound: "metadata element depth",
                max: MAX_ELEMENT_DEPTH as u64,
            });
        }
        let string = |c: &mut Cursor<'_>| -> Result<&'s str, JfrError> {
            let i = c.int(4, "metadata string index")?;
            usize::try_from(i)
                .ok()
                .and_then(|i| strings.get(i))
                .map(String::as_str)
                .ok_or_else(|| {
                    JfrError::malformed(format!(
                        "metadata string index {i} is outside the table of {}",
                        strings.len()
                    ))
                })
        };
        let name = string(c)?;
        // An attribute is two indices, a child at least three: each at least a byte.
        let n_attrs = c.count(2, "metadata attribute count")?;
        let mut attrs = Vec::with_capacity(n_attrs);
        for _ in 0..n_attrs {
            attrs.push((string(c)?, string(c)?));
        }
        let n_children = c.count(3, "metadata child count")?;
        let mut children = Vec::with_capacity(n_children);
        for _ in 0..n_children {
            children.push(Element::parse(c, strings, depth + 1)?);
        }
        Ok(Element {
            name,
            attrs,
            children,
        })
    }

    fn attr(&self, key: &str) -> Option<&'s str> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}
