//! `profiledb-agent`: the perf_event sampler that feeds profiledb.
//!
//! Samples CPU stacks of the whole machine (or of `--pid`s) with perf_event_open,
//! symbolizes them on the host, and pushes one pprof per event type every push
//! interval to a profiledb server (`POST /push.v1.PusherService/Push`). See the
//! library crate (`profiledb_agent`) for how each part works.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use profiledb_agent::agent::{self, AgentConfig};
use profiledb_agent::config::{parse_duration, parse_events, parse_tag};
use profiledb_agent::pprof::LabelConfig;
use profiledb_agent::push::RetryPolicy;
use profiledb_agent::symbolize::SymbolizeMode;

#[derive(Parser)]
#[command(
    name = "profiledb-agent",
    version,
    about = "Samples CPU stacks with perf_event and pushes them to profiledb",
    long_about = "Samples CPU stacks with perf_event_open (the whole machine, or --pid processes), \
symbolizes them on the host (ELF symbols, /proc/kallsyms) and pushes one pprof per event type \
every --push-interval to POST /push.v1.PusherService/Push. Runs until SIGINT/SIGTERM (then \
flushes and exits) or --duration."
)]
struct Cli {
    /// Base URL of the profiledb server.
    #[arg(long, default_value = "http://127.0.0.1:4040")]
    server: String,
    /// Sample only these processes (repeatable); default: the whole machine.
    #[arg(long)]
    pid: Vec<u32>,
    /// Stop after this long (e.g. 30s, 5m); default: until SIGTERM/SIGINT.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How often to push a window.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    push_interval: Duration,
    /// Samples per second per CPU.
    #[arg(long, default_value_t = 19)]
    frequency: u64,
    /// Events: cpu-clock, cycles, instructions, cache-misses, branch-misses (comma-separated).
    /// Hardware events fall back to cpu-clock where no PMU exists.
    #[arg(long, default_value = "cpu-clock")]
    event: String,
    /// service_name for every sample (default: the process name).
    #[arg(long)]
    service: Option<String>,
    /// Extra label k=v on every series (repeatable).
    #[arg(long, value_parser = parse_tag)]
    tag: Vec<(String, String)>,
    /// host label (default: the machine's hostname).
    #[arg(long)]
    host: Option<String>,
    /// Stop sampling if the agent's own CPU use passes this % of one CPU.
    #[arg(long, default_value_t = 1.0)]
    max_cpu_percent: f64,
    /// Bytes of user stack copied per sample for DWARF unwinding (0 = frame pointers only).
    #[arg(long, default_value_t = 16384)]
    stack_bytes: u32,
    /// Windows kept waiting when the server is slow or down (oldest dropped beyond).
    #[arg(long, default_value_t = 6)]
    max_queued_windows: usize,
    /// Attempts per window before it is dropped.
    #[arg(long, default_value_t = 4)]
    push_attempts: u32,
    /// Log every window.
    #[arg(long, short)]
    verbose: bool,
    /// Ask the server for the sampling plan every period and follow it (events,
    /// frequencies, windows, budget, counting). The flags above are the plan until
    /// the server first answers; when it cannot be reached the last plan is kept.
    #[arg(long)]
    control: bool,
    /// Platform label of hardware-event series (default: from /proc/cpuinfo, such as
    /// intel/skylake).
    #[arg(long)]
    platform: Option<String>,
    /// Do not open the dummy tracking event: processes are then known only from
    /// /proc reads (to measure what tracking saves).
    #[arg(long, hide = true)]
    no_mmap_tracking: bool,
    /// Where user-space frames get their names: `host` reads the mapped files'
    /// symbol tables here; `server` sends addresses, mappings and build ids and
    /// lets profiledb symbolize them from uploaded debug files or debuginfod
    /// (lighter on the host; stripped binaries get names there).
    #[arg(long, value_enum, default_value_t = Symbolize::Host)]
    symbolize: Symbolize,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Symbolize {
    Host,
    Server,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let prev = unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            bail!("cannot install a handler for signal {sig}");
        }
    }
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if cli.frequency == 0 || cli.frequency > 10_000 {
        bail!("--frequency must be between 1 and 10000 Hz");
    }
    if cli.push_interval < Duration::from_millis(100) {
        bail!("--push-interval must be at least 100ms");
    }
    if cli.stack_bytes % 8 != 0 || cli.stack_bytes > 65_528 {
        bail!("--stack-bytes must be a multiple of 8 and at most 65528");
    }
    let events = parse_events(&cli.event).context("parsing --event")?;
    install_signal_handlers()?;
    let cfg = AgentConfig {
        server: cli.server,
        pids: cli.pid,
        duration: cli.duration,
        push_interval: cli.push_interval,
        frequency: cli.frequency,
        events,
        labels: LabelConfig {
            host: cli.host.unwrap_or_else(hostname),
            service: cli.service,
            platform: cli.platform.or_else(profiledb_agent::platform::detect),
            tags: cli.tag,
        },
        max_cpu_percent: cli.max_cpu_percent,
        stack_bytes: cli.stack_bytes,
        max_queue: cli.max_queued_windows,
        retry: RetryPolicy {
            max_attempts: cli.push_attempts.max(1),
            ..RetryPolicy::default()
        },
        verbose: cli.verbose,
        control: cli.control,
        mmap_tracking: !cli.no_mmap_tracking,
        symbolize: match cli.symbolize {
            Symbolize::Host => SymbolizeMode::Host,
            Symbolize::Server => SymbolizeMode::Server,
        },
        ..AgentConfig::default()
    };
    let s = agent::run(cfg, &STOP).context("sampling failed")?;
    let unsym = if s.symbols.frames == 0 {
        0.0
    } else {
        100.0 * s.symbols.unsymbolized as f64 / s.symbols.frames as f64
    };
    eprintln!(
        "profiledb-agent: done: events {:?}, {} fds, {} samples ({} idle, {} lost, {} over the stack bound), \
         {} windows ({} dropped by a busy symbolizer), {} pushed, {} dropped (queue full {}, failed {}, shutdown {}), {} failed attempts, \
         {:.1}% frames unsymbolized, {} samples outside known mappings, {} of unknown tasks, \
         avg user stack depth {:.1} (frame-pointer callchain alone {:.1}), agent CPU {:.3}%{}{}",
        s.events.iter().map(|e| e.name()).collect::<Vec<_>>(),
        s.fds,
        s.samples,
        s.idle_samples,
        s.lost_samples,
        s.dropped_stack_samples,
        s.windows,
        s.symbols.dropped_windows,
        s.push.pushed_windows,
        s.push.dropped(),
        s.push.dropped_queue_full,
        s.push.dropped_failed,
        s.push.dropped_shutdown,
        s.push.failed_attempts,
        unsym,
        s.unsymbolized_samples,
        s.unattributed_samples,
        s.avg_user_depth(),
        s.avg_fp_depth(),
        s.cpu_percent,
        match s.guard_tripped {
            Some(p) => format!(", STOPPED by the CPU guard at {p:.2}%"),
            None => String::new(),
        },
        if cli.control {
            format!(
                ", {} plans followed, {} check-ins ({} failed), guard: {}",
                s.plans_followed,
                s.control.calls_ok + s.control.calls_failed,
                s.control.calls_failed,
                s.guard_actions.last().map_or("never acted", String::as_str)
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
