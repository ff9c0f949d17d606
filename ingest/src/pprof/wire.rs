//! A streaming reader for `perftools.profiles.Profile` that fills flat arrays instead
//! of allocating one message per sample, location and line as prost does.
//!
//! It accepts exactly the inputs prost accepts and decodes them to the same values
//! (last value wins for scalars, packed and unpacked repeated scalars, repeated
//! `period_type` occurrences merged, unknown fields and groups skipped with prost's
//! recursion limit). It does not build error messages: on [`Malformed`] the caller
//! decodes the bytes again with prost to report prost's error, so malformed input
//! fails exactly as before.

use std::cell::Cell;

use crate::proto::pprof::Profile;

/// The input is not a valid `Profile` encoding (prost has the details).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

type R<T> = Result<T, Malformed>;

/// prost's `RECURSION_LIMIT`.
const RECURSION_LIMIT: u32 = 100;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawValueType {
    pub r#type: i64,
    pub unit: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawMapping {
    pub id: u64,
    pub memory_start: u64,
    pub memory_limit: u64,
    pub file_offset: u64,
    pub filename: i64,
    pub build_id: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawLocation {
    pub id: u64,
    pub mapping_id: u64,
    pub address: u64,
    /// Range of this location's lines in [`RawProfile::lines`].
    pub lines_start: usize,
    pub lines_end: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawLine {
    pub function_id: u64,
    pub line: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawFunction {
    pub id: u64,
    pub name: i64,
    pub system_name: i64,
    pub filename: i64,
}

/// The parts of a profile the converter reads, stored flat. Sample `i` owns
/// `loc_ids[loc_off[i]..loc_off[i + 1]]`, likewise values and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawProfile<'a> {
    pub sample_type: Vec<RawValueType>,
    pub loc_ids: Vec<u64>,
    pub loc_off: Vec<usize>,
    pub values: Vec<i64>,
    pub value_off: Vec<usize>,
    /// `(key, str)` of the string labels (`str != 0`); numeric labels are not kept.
    pub labels: Vec<(i64, i64)>,
    pub label_off: Vec<usize>,
    pub mappings: Vec<RawMapping>,
    pub locations: Vec<RawLocation>,
    pub lines: Vec<RawLine>,
    pub functions: Vec<RawFunction>,
    pub strings: Vec<&'a [u8]>,
    pub time_nanos: i64,
    pub period_type: Option<RawValueType>,
    pub period: i64,
}

/// A thread's tables from its last profile, emptied: the next profile it decodes
/// fills memory already mapped and warm instead of growing new vectors (regrowth
/// and first-touch page faults were a tenth of a decoder's time on the fleet's
/// pushes). Kept only up to [`SPARE_MAX_BYTES`] a thread, so one large profile
/// does not pin its memory.
#[derive(Default)]
struct Spare {
    loc_ids: Vec<u64>,
    loc_off: Vec<usize>,
    values: Vec<i64>,
    value_off: Vec<usize>,
    labels: Vec<(i64, i64)>,
    label_off: Vec<usize>,
    mappings: Vec<RawMapping>,
    locations: Vec<RawLocation>,
    lines: Vec<RawLine>,
    functions: Vec<RawFunction>,
}

/// The most a thread keeps in its [`Spare`] tables.
const SPARE_MAX_BYTES: usize = 8 << 20;

thread_local! {
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

impl Spare {
    fn bytes(&self) -> usize {
        fn b<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        b(&self.loc_ids)
            + b(&self.loc_off)
            + b(&self.values)
            + b(&self.value_off)
            + b(&self.labels)
            + b(&self.label_off)
            + b(&self.mappings)
            + b(&self.locations)
            + b(&self.lines)
            + b(&self.functions)
    }
}

impl Drop for RawProfile<'_> {
    fn drop(&mut self) {
        fn emptied<T>(v: &mut Vec<T>) -> Vec<T> {
            let mut v = std::mem::take(v);
            v.clear();
            v
        }
        let spare = Spare {
            loc_ids: emptied(&mut self.loc_ids),
            loc_off: emptied(&mut self.loc_off),
            values: emptied(&mut self.values),
            value_off: emptied(&mut self.value_off),
            labels: emptied(&mut self.labels),
            label_off: emptied(&mut self.label_off),
            mappings: emptied(&mut self.mappings),
            locations: emptied(&mut self.locations),
            lines: emptied(&mut self.lines),
            functions: emptied(&mut self.functions),
        };
        if spare.bytes() <= SPARE_MAX_BYTES {
            // Not there while the thread is being torn down: then the tables are freed.
            let _ = SPARE.try_with(|s| s.set(Some(spare)));
        }
    }
}

impl<'a> RawProfile<'a> {
    fn empty() -> Self {
        let mut spare = SPARE
            .try_with(Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        for off in [
            &mut spare.loc_off,
            &mut spare.value_off,
            &mut spare.label_off,
        ] {
            off.push(0);
        }
        RawProfile {
            sample_type: Vec::new(),
            loc_ids: spare.loc_ids,
            loc_off: spare.loc_off,
            values: spare.values,
            value_off: spare.value_off,
            labels: spare.labels,
            label_off: spare.label_off,
            mappings: spare.mappings,
            locations: spare.locations,
            lines: spare.lines,
            functions: spare.functions,
            strings: Vec::new(),
            time_nanos: 0,
            period_type: None,
            period: 0,
        }
    }

    pub fn sample_count(&self) -> usize {
        self.loc_off.len() - 1
    }

    /// Location ids, values and string labels of sample `i`.
    #[inline]
    pub fn sample(&self, i: usize) -> (&[u64], &[i64], &[(i64, i64)]) {
        let range = |off: &[usize]| match (off.get(i), off.get(i + 1)) {
            (Some(&a), Some(&b)) => a..b,
            _ => 0..0,
        };
        (
            self.loc_ids.get(range(&self.loc_off)).unwrap_or_default(),
            self.values.get(range(&self.value_off)).unwrap_or_default(),
            self.labels.get(range(&self.label_off)).unwrap_or_default(),
        )
    }

    pub fn location_lines(&self, loc: &RawLocation) -> &[RawLine] {
        self.lines
            .get(loc.lines_start..loc.lines_end)
            .unwrap_or_default()
    }

    /// Copies a prost-decoded profile (for [`super::profile_to_batch`]).
    pub fn from_prost(p: &'a Profile) -> Self {
        let mut raw = RawProfile::empty();
        raw.sample_type = p
            .sample_type
            .iter()
            .map(|vt| RawValueType {
                r#type: vt.r#type,
                unit: vt.unit,
            })
            .collect();
        for s in &p.sample {
            raw.loc_ids.extend_from_slice(&s.location_id);
            raw.loc_off.push(raw.loc_ids.len());
            raw.values.extend_from_slice(&s.value);
            raw.value_off.push(raw.values.len());
            raw.labels.extend(
                s.label
                    .iter()
                    .filter(|l| l.str != 0)
                    .map(|l| (l.key, l.str)),
            );
            raw.label_off.push(raw.labels.len());
        }
        raw.mappings = p
            .mapping
            .iter()
            .map(|m| RawMapping {
                id: m.id,
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename: m.filename,
                build_id: m.build_id,
            })
            .collect();
        for l in &p.location {
            let lines_start = raw.lines.len();
            raw.lines.extend(l.line.iter().map(|line| RawLine {
                function_id: line.function_id,
                line: line.line,
            }));
            raw.locations.push(RawLocation {
                id: l.id,
                mapping_id: l.mapping_id,
                address: l.address,
                lines_start,
                lines_end: raw.lines.len(),
            });
        }
        raw.functions = p
            .function
            .iter()
            .map(|f| RawFunction {
                id: f.id,
                name: f.name,
                system_name: f.system_name,
                filename: f.filename,
            })
            .collect();
        raw.strings = p.string_table.iter().map(|b| b.as_ref()).collect();
        raw.time_nanos = p.time_nanos;
        raw.period_type = p.period_type.as_ref().map(|vt| RawValueType {
            r#type: vt.r#type,
            unit: vt.unit,
        });
        raw.period = p.period;
        raw
    }

    /// Decodes an encoded `Profile`.
    pub fn parse(buf: &'a [u8]) -> R<Self> {
        let mut raw = RawProfile::empty();
        // Rough capacity guesses from the body size avoid most regrowth.
        raw.strings.reserve(buf.len() / 64);
        let mut r = Reader::new(buf);
        let depth = RECURSION_LIMIT;
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match tag {
                1 => {
                    let msg = r.message(wt, depth)?;
                    raw.sample_type
                        .push(value_type(msg, RawValueType::default(), depth - 1)?);
                }
                2 => {
                    let msg = r.message(wt, depth)?;
                    raw.parse_sample(msg, depth - 1)?;
                }
                3 => {
                    let msg = r.message(wt, depth)?;
                    raw.parse_mapping(msg, depth - 1)?;
                }
                4 => {
                    let msg = r.message(wt, depth)?;
                    raw.parse_location(msg, depth - 1)?;
                }
                5 => {
                    let msg = r.message(wt, depth)?;
                    raw.parse_function(msg, depth - 1)?;
                }
                6 => {
                    expect(wt, LEN)?;
                    let s = r.bytes()?;
                    raw.strings.push(s);
                }
                // drop_frames, keep_frames, duration_nanos, default_sample_type, doc_url
                7 | 8 | 10 | 14 | 15 => {
                    r.int(wt)?;
                }
                9 => raw.time_nanos = r.int(wt)? as i64,
                11 => {
                    let msg = r.message(wt, depth)?;
                    let prev = raw.period_type.unwrap_or_default();
                    raw.period_type = Some(value_type(msg, prev, depth - 1)?);
                }
                12 => raw.period = r.int(wt)? as i64,
                // comment
                13 => r.repeated_varint(wt, |_| {})?,
                _ => r.skip(wt, tag, depth)?,
            }
        }
        Ok(raw)
    }

    fn parse_sample(&mut self, buf: &'a [u8], depth: u32) -> R<()> {
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match tag {
                1 => {
                    let ids = &mut self.loc_ids;
                    r.repeated_varint(wt, |v| ids.push(v))?;
                }
                2 => {
                    let values = &mut self.values;
                    r.repeated_varint(wt, |v| values.push(v as i64))?;
                }
                3 => {
                    let msg = r.message(wt, depth)?;
                    let (key, str) = label(msg, depth - 1)?;
                    if str != 0 {
                        self.labels.push((key, str));
                    }
                }
                _ => r.skip(wt, tag, depth)?,
            }
        }
        self.loc_off.push(self.loc_ids.len());
        self.value_off.push(self.values.len());
        self.label_off.push(self.labels.len());
        Ok(())
    }

    fn parse_mapping(&mut self, buf: &'a [u8], depth: u32) -> R<()> {
        let mut m = RawMapping::default();
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match tag {
                1 => m.id = r.int(wt)?,
                2 => m.memory_start = r.int(wt)?,
                3 => m.memory_limit = r.int(wt)?,
                4 => m.file_offset = r.int(wt)?,
                5 => m.filename = r.int(wt)? as i64,
                6 => m.build_id = r.int(wt)? as i64,
                // has_* flags
                7..=10 => {
                    r.int(wt)?;
                }
                _ => r.skip(wt, tag, depth)?,
            }
        }
        self.mappings.push(m);
        Ok(())
    }

    fn parse_location(&mut self, buf: &'a [u8], depth: u32) -> R<()> {
        let lines_start = self.lines.len();
        let mut l = RawLocation {
            lines_start,
            lines_end: lines_start,
            ..RawLocation::default()
        };
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match tag {
                1 => l.id = r.int(wt)?,
                2 => l.mapping_id = r.int(wt)?,
                3 => l.address = r.int(wt)?,
                4 => {
                    let msg = r.message(wt, depth)?;
                    self.lines.push(line(msg, depth - 1)?);
                }
                // is_folded
                5 => {
                    r.int(wt)?;
                }
                _ => r.skip(wt, tag, depth)?,
            }
        }
        l.lines_end = self.lines.len();
        self.locations.push(l);
        Ok(())
    }

    fn parse_function(&mut self, buf: &'a [u8], depth: u32) -> R<()> {
        let mut f = RawFunction::default();
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match tag {
                1 => f.id = r.int(wt)?,
                2 => f.name = r.int(wt)? as i64,
                3 => f.system_name = r.int(wt)? as i64,
                4 => f.filename = r.int(wt)? as i64,
                // start_line
                5 => {
                    r.int(wt)?;
                }
                _ => r.skip(wt, tag, depth)?,
            }
        }
        self.functions.push(f);
        Ok(())
    }
}

fn value_type(buf: &[u8], mut vt: RawValueType, depth: u32) -> R<RawValueType> {
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match tag {
            1 => vt.r#type = r.int(wt)? as i64,
            2 => vt.unit = r.int(wt)? as i64,
            _ => r.skip(wt, tag, depth)?,
        }
    }
    Ok(vt)
}

/// `(key, str)` of a `Label`.
fn label(buf: &[u8], depth: u32) -> R<(i64, i64)> {
    let (mut key, mut str) = (0, 0);
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match tag {
            1 => key = r.int(wt)? as i64,
            2 => str = r.int(wt)? as i64,
            // num, num_unit
            3 | 4 => {
                r.int(wt)?;
            }
            _ => r.skip(wt, tag, depth)?,
        }
    }
    Ok((key, str))
}

fn line(buf: &[u8], depth: u32) -> R<RawLine> {
    let mut l = RawLine::default();
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match tag {
            1 => l.function_id = r.int(wt)?,
            2 => l.line = r.int(wt)? as i64,
            // column
            3 => {
                r.int(wt)?;
            }
            _ => r.skip(wt, tag, depth)?,
        }
    }
    Ok(l)
}

#[inline(always)]
fn expect(wt: u8, want: u8) -> R<()> {
    if wt == want {
        Ok(())
    } else {
        Err(Malformed)
    }
}

/// A cursor over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// prost's `decode_varint`: at most 10 bytes, the tenth at most 1.
    #[inline(always)]
    fn varint(&mut self) -> R<u64> {
        match *self.buf {
            [b, ref rest @ ..] if b < 0x80 => {
                self.buf = rest;
                Ok(u64::from(b))
            }
            [b0, b1, ref rest @ ..] if b1 < 0x80 => {
                self.buf = rest;
                Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
            }
            _ => self.varint_slow(),
        }
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> R<u64> {
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().take(10).enumerate() {
            value |= u64::from(b & 0x7f) << (i * 7);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(Malformed);
                }
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(Malformed)
    }

    /// prost's `decode_key`: returns (tag, wire type).
    #[inline(always)]
    fn key(&mut self) -> R<(u32, u8)> {
        let key = self.varint()?;
        let key = u32::try_from(key).map_err(|_| Malformed)?;
        let wt = (key & 7) as u8;
        if wt > FIXED32 || key >> 3 == 0 {
            return Err(Malformed);
        }
        Ok((key >> 3, wt))
    }

    /// A varint scalar field (int64, uint64, bool).
    #[inline(always)]
    fn int(&mut self, wt: u8) -> R<u64> {
        expect(wt, VARINT)?;
        self.varint()
    }

    #[inline(always)]
    fn bytes(&mut self) -> R<&'a [u8]> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        if len > self.buf.len() {
            return Err(Malformed);
        }
        let (head, tail) = self.buf.split_at(len);
        self.buf = tail;
        Ok(head)
    }

    /// A message field's bytes. prost checks the recursion limit before descending.
    #[inline(always)]
    fn message(&mut self, wt: u8, depth: u32) -> R<&'a [u8]> {
        expect(wt, LEN)?;
        if depth == 0 {
            return Err(Malformed);
        }
        self.bytes()
    }

    /// A repeated varint field, packed or not.
    #[inline(always)]
    fn repeated_varint(&mut self, wt: u8, mut push: impl FnMut(u64)) -> R<()> {
        match wt {
            LEN => {
                let mut packed = Reader::new(self.bytes()?);
                while !packed.is_empty() {
                    push(packed.varint()?);
                }
                Ok(())
            }
            VARINT => {
                push(self.varint()?);
                Ok(())
            }
            _ => Err(Malformed),
        }
    }

    /// prost's `skip_field`.
    fn skip(&mut self, wt: u8, tag: u32, depth: u32) -> R<()> {
        if depth == 0 {
            return Err(Malformed);
        }
        let len = match wt {
            VARINT => {
                self.varint()?;
                0
            }
            FIXED32 => 4,
            FIXED64 => 8,
            LEN => self.varint()?,
            START_GROUP => loop {
                let (inner_tag, inner_wt) = self.key()?;
                if inner_wt == END_GROUP {
                    if inner_tag != tag {
                        return Err(Malformed);
                    }
                    break 0;
                }
                self.skip(inner_wt, inner_tag, depth - 1)?;
            },
            _ => return Err(Malformed),
        };
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        self.buf = self.buf.get(len..).ok_or(Malformed)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
