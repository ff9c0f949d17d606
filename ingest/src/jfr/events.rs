//! The events a profile is made of, picked out of a chunk's event stream.
//!
//! Every event starts with its size and type id; the types profiledb reads are
//! found by name in the chunk's metadata and decoded, the others skipped by size.

use super::cursor::Cursor;
use super::error::JfrError;
use super::metadata::Metadata;
use super::pool::Pools;
use super::value::{Decoder, Value};

/// Which event an [`Observation`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `jdk.ExecutionSample` (cpu, itimer or wall mode of async-profiler).
    Execution,
    /// `profiler.WallClockSample` (async-profiler's batched wall samples).
    WallClock,
    /// `jdk.ObjectAllocationInNewTLAB`.
    AllocInNewTlab,
    /// `jdk.ObjectAllocationOutsideTLAB`.
    AllocOutsideTlab,
    /// `jdk.ObjectAllocationSample`.
    AllocSample,
    /// `jdk.JavaMonitorEnter`.
    MonitorEnter,
    /// `jdk.ThreadPark`.
    ThreadPark,
    /// `profiler.LiveObject`.
    LiveObject,
}

impl Source {
    const ALL: [(Source, &'static str, Option<&'static str>); 8] = [
        (Source::Execution, "jdk.ExecutionSample", None),
        (
            Source::WallClock,
            "profiler.WallClockSample",
            Some("samples"),
        ),
        (
            Source::AllocInNewTlab,
            "jdk.ObjectAllocationInNewTLAB",
            Some("tlabSize"),
        ),
        (
            Source::AllocOutsideTlab,
            "jdk.ObjectAllocationOutsideTLAB",
            Some("allocationSize"),
        ),
        (
            Source::AllocSample,
            "jdk.ObjectAllocationSample",
            Some("weight"),
        ),
        (
            Source::MonitorEnter,
            "jdk.JavaMonitorEnter",
            Some("duration"),
        ),
        (Source::ThreadPark, "jdk.ThreadPark", Some("duration")),
        (Source::LiveObject, "profiler.LiveObject", None),
    ];
}

/// One profiling event, reduced to what the conversion uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The event type.
    pub source: Source,
    /// Key in the stack trace pool.
    pub stack: u64,
    /// Pool type of `stack`.
    pub stack_class: u64,
    /// async-profiler's context id (the labels snapshot's key), 0 when absent.
    pub context: u64,
    /// Name of the thread state (`STATE_RUNNABLE`, …) when the event has one.
    pub state: Option<String>,
    /// The event's weight: bytes, duration or sample count (0 when it has none).
    pub value: i64,
    /// The event's `startTime` in ticks (see [`super::chunk::Header::time_ms`]).
    pub ticks: Option<i64>,
}

/// What one event said.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A profiling event.
    Profile(Observation),
    /// A `jdk.ActiveSetting`: async-profiler records its `event` mode this way, the
    /// JDK each event type's `period` (`id` names the event type).
    Setting {
        /// The id of the event type the setting is of, when the event says.
        id: Option<u64>,
        /// Setting name.
        name: String,
        /// Setting value.
        value: String,
    },
}

/// Decoding plan for one event type: field positions looked up once per chunk.
struct Plan {
    class: u64,
    source: Option<Source>,
    stack: Option<usize>,
    context: Option<usize>,
    state: Option<usize>,
    value: Option<usize>,
    time: Option<usize>,
    name: Option<usize>,
    setting_value: Option<usize>,
    setting_id: Option<usize>,
}

/// Walks the events of one chunk in order.
pub struct Events<'a> {
    chunk: &'a [u8],
    pos: usize,
    compressed: bool,
    plans: Vec<Plan>,
}

impl<'a> Events<'a> {
    /// Events of `chunk`, which start right after the 68-byte header.
    pub fn new(chunk: &'a [u8], compressed: bool, meta: &Metadata) -> Self {
        let mut plans = Vec::new();
        for (source, name, value_field) in Source::ALL {
            if let Some(c) = meta.by_name(name) {
                plans.push(Plan {
                    class: c.id,
                    source: Some(source),
                    stack: c.field_index("stackTrace"),
                    context: c.field_index("contextId"),
                    state: c.field_index("state"),
                    value: value_field.and_then(|f| c.field_index(f)),
                    time: c.field_index("startTime"),
                    name: None,
                    setting_value: None,
                    setting_id: None,
                });
            }
        }
        if let Some(c) = meta.by_name("jdk.ActiveSetting") {
            plans.push(Plan {
                class: c.id,
                source: None,
                stack: None,
                context: None,
                state: None,
                value: None,
                time: None,
                name: c.field_index("name"),
                setting_value: c.field_index("value"),
                setting_id: c.field_index("id"),
            });
        }
        Events {
            chunk,
            pos: super::chunk::HEADER_SIZE,
            compressed,
            plans,
        }
    }

    /// The next event profiledb reads, or `None` at the chunk's end.
    pub fn next(
        &mut self,
        dec: &mut Decoder<'_>,
        pools: &Pools,
    ) -> Result<Option<Event>, JfrError> {
        while self.pos < self.chunk.len() {
            let start = self.pos;
            let mut c = Cursor::new(self.chunk, start, self.compressed);
            let size = c.int(4, "event size")?;
            let ty = c.long("event type")?;
            self.pos = usize::try_from(size)
                .ok()
                .filter(|&s| s > 0)
                .and_then(|s| start.checked_add(s))
                .filter(|&end| end <= self.chunk.len())
                .ok_or_else(|| {
                    JfrError::malformed(format!(
                        "event at byte {start} has size {size}, past the chunk's end"
                    ))
                })?;
            let Some(plan) = self.plans.iter().find(|p| p.class == ty) else {
                continue;
            };
            // The event's fields are read from its own bytes only.
            let mut body = Cursor::new(&self.chunk[..self.pos], c.pos(), self.compressed);
            let value = dec.value(&mut body, ty)?;
            return Ok(Some(plan.event(&value, dec.meta(), pools)));
        }
        Ok(None)
    }
}

impl Plan {
    fn event(&self, v: &Value, meta: &Metadata, pools: &Pools) -> Event {
        let Some(source) = self.source else {
            let text = |i| v.field(i).and_then(|s| pools.text(s)).unwrap_or_default();
            return Event::Setting {
                id: v
                    .field(self.setting_id)
                    .and_then(Value::int)
                    .map(|i| i as u64),
                name: text(self.name),
                value: text(self.setting_value),
            };
        };
        let (stack_class, stack) = match v.field(self.stack) {
            Some(Value::Ref { class, key }) => (*class, *key),
            _ => (0, 0),
        };
        let state = v
            .field(self.state)
            .and_then(|s| pools.field(meta, s, "name"))
            .and_then(|n| pools.text(n));
        Event::Profile(Observation {
            source,
            stack,
            stack_class,
            context: v.field(self.context).and_then(Value::int).unwrap_or(0) as u64,
            state,
            value: v.field(self.value).and_then(Value::int).unwrap_or(0),
            ticks: v.field(self.time).and_then(Value::int),
        })
    }
}
