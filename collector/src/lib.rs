//! `profiledb-agent`: a lightweight perf_event collector that feeds profiledb.
//!
//! The agent samples CPU stacks with `perf_event_open` (through perf-event2): one fd per
//! event per CPU in system-wide mode (or per thread and CPU with `--pid`), user +
//! kernel callchains, pid/tid and the cgroup id where the kernel supports it. A dummy
//! event per CPU tracks `mmap2`/`comm`/`fork`/`exit` records from before the scan of
//! `/proc` for the processes already running, so processes started during the scan or
//! exiting inside a push window still symbolize at the end of it.
//!
//! With `--control` the agent asks the server for its sampling plan every period
//! (GWP's central controller): when to sample, which events at which Hz, which
//! processes or cgroups, the CPU budget, and per-cgroup counting.
//!
//! Every push interval the raw `(labels, stack) → count` window, with the mapping of
//! each user address, is handed to a symbolizer thread, which resolves it on the host
//! (ELF symbol tables of the mapped files read with `pread`, separate debug files by
//! build id, `/proc/kallsyms` for the kernel), encodes one pprof per event type and
//! queues it for `POST /push.v1.PusherService/Push`. Pushing happens on its own thread with
//! a bounded queue, bounded retries with backoff and drop accounting; a CPU guard stops
//! sampling when the agent's own CPU use passes its budget.
//!
//! The crate depends on no profiledb crate but `profiledb-proto`: the shared wire
//! schemas (pprof, push.v1) and the pprof builder the server's export uses too.
//!
//! Modules:
//! - [`config`]: parsing of durations, tags and events from the command line.
//! - [`procs`]: the process table (maps, comm, fork/exit) fed by perf records.
//! - [`symbolize`]: the symbolizer thread and its bounded caches keyed by file identity.
//! - [`elfsyms`]: ELF symbol lookup by file offset in bounded memory (no mmap).
//! - [`kallsyms`]: the compact kernel symbol index.
//! - [`aggregate`]: the per-window `(labels, stack) → count` map and its bounds.
//! - [`pprof`]: building the pprof `Profile` and the push request.
//! - [`push`]: the pusher thread, retries, drop accounting, the HTTP transport.
//! - [`guard`]: the CPU overhead guard (`/proc/self/stat`).
//! - [`perf`]: opening the perf_event fds and decoding their records.
//! - [`unwind`]: DWARF unwinding of user stacks copied by the kernel (framehop).
//! - [`plan`]: the plan followed (the server's, or the command line's).
//! - [`control`]: the check-in thread asking the server for plans (`--control`).
//! - [`counting`]: per-cgroup counting rounds, pushed as `cgroup:<event>` profiles.
//! - [`cgroups`]: cgroup v2 ids and paths.
//! - [`platform`]: the CPU's vendor/microarchitecture label.
//! - [`sampler`]: records in, windows out; the encoder on the symbolizer thread.
//! - [`agent`]: the main loop tying the above together.

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod agent;
pub mod aggregate;
pub mod cgroups;
pub mod config;
pub mod control;
pub mod counting;
pub mod elfsyms;
pub mod guard;
pub mod kallsyms;
pub mod perf;
pub mod plan;
pub mod platform;
pub mod pprof;
pub mod procs;
pub mod push;
pub mod sampler;
pub mod symbolize;
pub mod unwind;
