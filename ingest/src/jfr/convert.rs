//! JFR events → profile types, with Pyroscope's rules (grafana/jfr-parser's pprof
//! conversion), so that a recording gives the same totals here as there:
//!
//! - `jdk.ExecutionSample`: CPU (`process_cpu`) unless the thread state is
//!   `STATE_SLEEPING` or unknown; also wall time when the recording's `event`
//!   setting is `wall`. Each sample weighs one sampling period: 1 s / `sampleRate`
//!   when the upload names one, else the `period` the recording states for
//!   `jdk.ExecutionSample` in its `jdk.ActiveSetting` events (the JDK's recorder:
//!   20 ms with its default settings, 10 ms with `profile`), else 10 ms.
//! - `profiler.WallClockSample`: wall time of `samples` periods; also CPU when the
//!   thread was `STATE_RUNNABLE` in a `wall` recording.
//! - allocations in and outside TLABs and `jdk.ObjectAllocationSample`: one object
//!   and the TLAB size / allocation size / weight in bytes.
//! - `jdk.JavaMonitorEnter` (`mutex`) and `jdk.ThreadPark` (`block`): one
//!   contention and the duration as delay.
//! - `profiler.LiveObject`: one live object.
//!
//! The `event` setting is applied from where it appears in the event stream on, as
//! Pyroscope does; a `period` applies to its whole chunk, since the JDK writes its
//! settings events after some samples of the chunk. Every sample is stored at its
//! event's own time (`startTime`, to the second), or at the upload's time when the
//! event has none. A sample whose stack trace is missing is dropped; frames whose
//! method or class is missing are left out of their stack.

use std::collections::HashMap;

use profiledb_model::{
    Batch, Function, Labels, Location, Name, Sample, SeriesSamples, NAME_LABEL, PROFILE_TYPE_LABEL,
};

use super::events::{Observation, Source};
use super::labels::LabelsSnapshot;
use super::metadata::Metadata;
use super::pool::Pools;
use crate::error::IngestError;
use crate::label_rules::{
    check_label_name, check_series_labels, is_reserved, DROPPED_SAMPLE_LABELS,
};
use crate::limits::Limits;

/// A profile type a recording can yield: (`__name__`, full profile type id).
const OUT_TYPES: [(&str, &str); 13] = [
    ("process_cpu", "process_cpu:cpu:nanoseconds:cpu:nanoseconds"),
    ("wall", "wall:wall:nanoseconds:wall:nanoseconds"),
    (
        "memory",
        "memory:alloc_in_new_tlab_objects:count:space:bytes",
    ),
    ("memory", "memory:alloc_in_new_tlab_bytes:bytes:space:bytes"),
    (
        "memory",
        "memory:alloc_outside_tlab_objects:count:space:bytes",
    ),
    (
        "memory",
        "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
    ),
    ("mutex", "mutex:contentions:count:mutex:count"),
    ("mutex", "mutex:delay:nanoseconds:mutex:count"),
    ("block", "block:contentions:count:block:count"),
    ("block", "block:delay:nanoseconds:block:count"),
    ("memory", "memory:live:count:objects:count"),
    ("memory", "memory:alloc_sample_objects:count:space:bytes"),
    ("memory", "memory:alloc_sample_bytes:bytes:space:bytes"),
];
const CPU: usize = 0;
const WALL: usize = 1;

/// The (count type, weight type) an event source feeds, for the counted sources.
fn counted(source: Source) -> Option<(usize, Option<usize>)> {
    Some(match source {
        Source::AllocInNewTlab => (2, Some(3)),
        Source::AllocOutsideTlab => (4, Some(5)),
        Source::MonitorEnter => (6, Some(7)),
        Source::ThreadPark => (8, Some(9)),
        Source::LiveObject => (10, None),
        Source::AllocSample => (11, Some(12)),
        Source::Execution | Source::WallClock => return None,
    })
}

/// A CPU or wall sample's weight when neither the upload nor the recording says:
/// Pyroscope's default of 100 Hz.
pub const DEFAULT_PERIOD_NS: i64 = 10_000_000;

/// (profile type, context, stack, time in ms or `None`: the upload's).
type Key = (usize, u64, u32, Option<i64>);

/// Accumulates a recording's samples, summed per (type, context, stack, second).
pub struct Converter<'l> {
    batch: Batch,
    /// The upload's period (from `sampleRate`), which wins over the recording's.
    request_period_ns: Option<i64>,
    /// The `period` of `jdk.ExecutionSample` the recording states, as last seen.
    recording_period_ns: Option<i64>,
    labels: Option<&'l LabelsSnapshot>,
    functions: HashMap<String, u32>,
    locations: HashMap<(u32, u32), u32>,
    stacks: HashMap<Vec<u32>, u32>,
    /// (type, context, stack, time in ms) → value; `None` time: the upload's.
    totals: HashMap<Key, i64>,
    /// CPU and wall samples of the current chunk, counted in sampling periods
    /// until the chunk's period is known (when the upload names none).
    periods: HashMap<Key, i64>,
    /// The recording's `event` setting (`cpu`, `itimer`, `wall`, …).
    event: String,
    max_stack_depth: usize,
}

/// One chunk's tables, which its events' indices refer to.
pub struct ChunkTables<'c> {
    /// The chunk's metadata.
    pub meta: &'c Metadata,
    /// The chunk's constant pools.
    pub pools: &'c Pools,
    /// Stack trace key → stack index in the batch (`None`: missing trace).
    pub stack_cache: HashMap<u64, Option<u32>>,
    /// The chunk's header, which turns event ticks into times.
    pub header: super::chunk::Header,
}

impl<'l> Converter<'l> {
    /// A converter filling `batch`; CPU and wall samples weigh `period_ns` when
    /// given, else the recording's own period.
    pub fn new(
        batch: Batch,
        period_ns: Option<i64>,
        labels: Option<&'l LabelsSnapshot>,
        limits: &Limits,
    ) -> Self {
        Converter {
            batch,
            request_period_ns: period_ns,
            recording_period_ns: None,
            labels,
            functions: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
            totals: HashMap::new(),
            periods: HashMap::new(),
            event: String::new(),
            max_stack_depth: limits.max_stack_depth,
        }
    }

    /// Records a setting: `event` (async-profiler's mode) of the recording, or,
    /// when `of_execution_sample`, the `period` of `jdk.ExecutionSample`.
    pub fn setting(&mut self, name: &str, value: &str, of_execution_sample: bool) {
        match name {
            "event" => self.event = value.to_string(),
            "period" if of_execution_sample => {
                if let Some(ns) = period_ns_of(value) {
                    self.recording_period_ns = Some(ns);
                }
            }
            _ => {}
        }
    }

    /// Weighs the chunk's CPU and wall samples with its period (the recording's
    /// as last stated, else 10 ms); call at the end of every chunk.
    pub fn end_chunk(&mut self) {
        let period = self.recording_period_ns.unwrap_or(DEFAULT_PERIOD_NS);
        for (key, n) in self.periods.drain() {
            bump(&mut self.totals, key, n.saturating_mul(period));
        }
    }

    /// The recording's `event` setting, as last seen.
    pub fn event(&self) -> &str {
        &self.event
    }

    /// Adds one profiling event.
    pub fn observe(&mut self, o: &Observation, t: &mut ChunkTables<'_>) -> Result<(), IngestError> {
        let stack = match t.stack_cache.get(&o.stack) {
            Some(s) => *s,
            None => {
                let s = self.intern_stack(o, t)?;
                t.stack_cache.insert(o.stack, s);
                s
            }
        };
        let Some(stack) = stack else {
            return Ok(());
        };
        let state = o.state.as_deref();
        let wall_mode = self.event == "wall";
        // To the second: finer than any storage step, and a recording of many
        // events per second and stack keeps one sample per second and stack.
        let time = o
            .ticks
            .and_then(|ticks| t.header.time_ms(ticks))
            .map(|ms| ms - ms.rem_euclid(1000));
        let key = |ty: usize| (ty, o.context, stack, time);
        match (o.source, counted(o.source)) {
            (_, Some((count, weight))) => {
                bump(&mut self.totals, key(count), 1);
                if let Some(w) = weight {
                    bump(&mut self.totals, key(w), o.value);
                }
            }
            (Source::Execution, None) => {
                if state.is_some_and(|s| s != "STATE_SLEEPING") {
                    self.sampled(key(CPU), 1);
                }
                if wall_mode {
                    self.sampled(key(WALL), 1);
                }
            }
            (_, None) => {
                if wall_mode && state == Some("STATE_RUNNABLE") {
                    self.sampled(key(CPU), o.value);
                }
                self.sampled(key(WALL), o.value);
            }
        }
        Ok(())
    }

    /// `n` sampling periods of CPU or wall time: weighed now with the upload's
    /// period, or at the chunk's end with the recording's.
    fn sampled(&mut self, key: Key, n: i64) {
        match self.request_period_ns {
            Some(p) => bump(&mut self.totals, key, n.saturating_mul(p)),
            None => bump(&mut self.periods, key, n),
        }
    }

    fn intern_stack(
        &mut self,
        o: &Observation,
        t: &ChunkTables<'_>,
    ) -> Result<Option<u32>, IngestError> {
        let Some(frames) = t.pools.stack(t.meta, o.stack_class, o.stack) else {
            return Ok(None);
        };
        if frames.len() > self.max_stack_depth {
            return Err(IngestError::LimitExceeded {
                limit: "max_stack_depth",
                max: self.max_stack_depth as u64,
                detail: format!("stack trace {} with {} frames", o.stack, frames.len()),
            });
        }
        let method_class = t.meta.by_name("jdk.types.Method").map(|c| c.id);
        let mut locs = Vec::with_capacity(frames.len());
        for f in &frames {
            let Some(name) = method_class.and_then(|mc| t.pools.method_name(t.meta, mc, f.method))
            else {
                continue;
            };
            let next = self.functions.len() as u32;
            let function = *self.functions.entry(name).or_insert_with_key(|name| {
                self.batch.symbols.functions.push(Function {
                    name: name.as_str().into(),
                    file: Name::new(),
                });
                next
            });
            let line = u32::try_from(f.line).unwrap_or(0);
            let next = self.locations.len() as u32;
            let loc = *self.locations.entry((function, line)).or_insert_with(|| {
                self.batch.symbols.locations.push(Location {
                    function: Some(function),
                    mapping: None,
                    address: 0,
                    line,
                });
                next
            });
            locs.push(loc);
        }
        let next = self.batch.stacks.len() as u32;
        let stacks = &mut self.batch.stacks;
        Ok(Some(*self.stacks.entry(locs).or_insert_with_key(
            |leaf_first| {
                stacks.push_leaf_first(leaf_first.iter().copied());
                next
            },
        )))
    }

    /// The batch: one series per (profile type, context labels), each stack once
    /// per second. `base` holds `service_name` and the query's tags; `time_ms` is
    /// the time of samples whose event has none.
    pub fn finish(
        mut self,
        base: &Labels,
        time_ms: i64,
        limits: &Limits,
    ) -> Result<Batch, IngestError> {
        let mut series: HashMap<Labels, usize> = HashMap::new();
        let mut context_labels: HashMap<u64, Labels> = HashMap::new();
        // Contexts whose labels are equal (or dropped) share a series, so values
        // are summed again per (series, stack).
        let mut values: HashMap<(usize, u32, i64), i64> = HashMap::new();
        let mut totals: Vec<_> = self.totals.into_iter().filter(|(_, v)| *v != 0).collect();
        // Deterministic series order: by type, then context.
        totals.sort_unstable();
        for ((ty, context, stack, time), value) in totals {
            let mut labels = match context_labels.get(&context) {
                Some(l) => l.clone(),
                None => {
                    let l = context_series_labels(self.labels, context, base, limits)?;
                    context_labels.insert(context, l.clone());
                    l
                }
            };
            let (name, id) = OUT_TYPES[ty];
            labels.set(NAME_LABEL, name);
            labels.set(PROFILE_TYPE_LABEL, id);
            if !self.event.is_empty() {
                labels.set(JFR_EVENT_LABEL, self.event.as_str());
            }
            let idx = match series.get(&labels) {
                Some(&i) => i,
                None => {
                    check_series_labels(&labels, limits)?;
                    series.insert(labels.clone(), self.batch.series.len());
                    self.batch.series.push(SeriesSamples {
                        labels,
                        samples: Vec::new(),
                    });
                    self.batch.series.len() - 1
                }
            };
            let v = values
                .entry((idx, stack, time.unwrap_or(time_ms)))
                .or_insert(0);
            *v = v.saturating_add(value);
        }
        let mut values: Vec<_> = values.into_iter().collect();
        // Deterministic output: samples in stack, then time order within each series.
        values.sort_unstable();
        for ((idx, stack, timestamp_ms), value) in values {
            if let Some(s) = self.batch.series.get_mut(idx) {
                s.samples.push(Sample {
                    timestamp_ms,
                    stack,
                    value,
                });
            }
        }
        Ok(self.batch)
    }
}

/// A JFR duration setting (`20 ms`, `1 s`, `500 us`, `10000000 ns`) in ns; `None`
/// for anything else (`off`, `everyChunk`, …).
pub(crate) fn period_ns_of(value: &str) -> Option<i64> {
    let (number, unit) = value.trim().split_once(char::is_whitespace)?;
    let n: i64 = number.parse().ok().filter(|&n| n > 0)?;
    let scale = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn bump(map: &mut HashMap<Key, i64>, key: Key, v: i64) {
    let e = map.entry(key).or_insert(0);
    *e = e.saturating_add(v);
}

/// Series label Pyroscope adds with the recording's `event` setting.
pub const JFR_EVENT_LABEL: &str = "jfr_event";

/// `base` plus a context's labels (which win), minus reserved and per-request
/// names (`profile_id`, `span_id`, `trace_id`), as for pprof sample labels.
fn context_series_labels(
    snapshot: Option<&LabelsSnapshot>,
    context: u64,
    base: &Labels,
    limits: &Limits,
) -> Result<Labels, IngestError> {
    let mut labels = base.clone();
    for (k, v) in snapshot.map(|s| s.context(context)).unwrap_or_default() {
        if k.is_empty() || v.is_empty() || is_reserved(k) || DROPPED_SAMPLE_LABELS.contains(&k) {
            continue;
        }
        check_label_name(k, limits)?;
        labels.set(k, v);
    }
    Ok(labels)
}
