//! `vram record --interval 100ms --out FILE [--leak-check]`.
//!
//! Appends one JSON line per sample (see `vram_monitor::timeline` for the
//! format and the durability guarantee). Stops on Ctrl-C, after `--count`
//! samples or after `--duration`; with `--leak-check` prints each process's
//! verdict at the end and warns on stderr as soon as a process is flagged.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vram_monitor::leak::{LeakConfig, LeakFinding, LeakWatch};
use vram_monitor::timeline::TimelineWriter;
use vram_monitor::view::human_bytes;

use crate::monitor::{now_ms, open_source, parse_count, parse_interval, BadInput, SourceArgs};

/// Arguments of `vram record`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Time between samples: 100ms, 1s, 2.5s, 1m (10ms to 1h).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Timeline file (JSON Lines). Appended to, never truncated.
    #[arg(long, short)]
    pub out: PathBuf,
    /// Flag processes whose memory floor keeps rising (the lowest reading of
    /// each twelfth of the span: Mann-Kendall trend test, one-sided α = 0.01,
    /// and a rise in each of the last four twelfths, 64 MiB in all).
    #[arg(long)]
    pub leak_check: bool,
    /// Shortest span of readings before the leak check gives a verdict;
    /// growth that stops within two thirds of it (a warm-up) is never flagged.
    #[arg(long, default_value = "90s", value_parser = parse_duration, requires = "leak_check")]
    pub leak_min_span: Duration,
    /// Stop after this many samples.
    #[arg(long, value_parser = parse_count)]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 10m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    // Same syntax as intervals, without the one-hour ceiling.
    match s.strip_suffix('h') {
        Some(h) => {
            let hours = h
                .parse::<f64>()
                .ok()
                .filter(|v| *v > 0.0 && v.is_finite())
                .ok_or_else(|| format!("`{s}` is not a duration"))?;
            // `Duration` holds at most 2^64 s (~5e15 h); beyond it, from_secs_f64 panics.
            Duration::try_from_secs_f64(hours * 3600.0)
                .map_err(|_| format!("`{s}` is longer than a duration can be (about 5e15 h)"))
        }
        None => parse_interval(s),
    }
}

/// Consecutive failed samples tolerated before giving up.
const MAX_FAILURES: u32 = 10;

/// Live leak checks run at most this often (of sample time).
const ASSESS_EVERY_MS: u64 = 5_000;

/// One line for a verdict; the slope printed is the one the verdict used.
pub fn describe(f: &LeakFinding) -> String {
    format!(
        "gpu {} pid {} ({}): {} -> {} over {:.0} s, floor {}{}/s, rose in {} of the last 4 stretches, Mann-Kendall p={:.1e} {}",
        f.gpu,
        f.pid,
        f.command.chars().take(48).collect::<String>(),
        human_bytes(f.first_bytes),
        human_bytes(f.last_bytes),
        f.span_s,
        if f.slope_bytes_per_s < 0.0 { "-" } else { "+" },
        human_bytes(f.slope_bytes_per_s.abs() as u64),
        f.rising_chunks,
        f.whole.p_increasing,
        if f.leaking { "LEAK" } else { "ok" }
    )
}

/// Record until stopped.
pub fn run(args: &RecordArgs) -> anyhow::Result<()> {
    let mut source = open_source(&args.source)?;
    // A file that cannot be opened (missing folder, no permission) is the
    // user's to fix: bad input, exit 2.
    let mut writer = TimelineWriter::open(&args.out).map_err(|e| BadInput(e.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second handler cannot be installed (e.g. in tests): then Ctrl-C
        // simply kills the process, which the format tolerates.
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let config = LeakConfig {
        min_span_s: args.leak_min_span.as_secs_f64(),
        ..LeakConfig::default()
    };
    let mut watch = args
        .leak_check
        .then(|| LeakWatch::new(config, ASSESS_EVERY_MS));
    let started = Instant::now();
    let mut next = Instant::now();
    let _ = writeln!(
        crate::output::stderr(),
        "vram record: {} every {:?} -> {} (Ctrl-C to stop)",
        source.describe(),
        args.interval,
        args.out.display()
    );
    let mut n = 0u64;
    let mut failures = 0u32;
    while !stop.load(Ordering::SeqCst)
        && args.count.is_none_or(|c| n < c)
        && args.duration.is_none_or(|d| started.elapsed() < d)
    {
        let sample = match source.sample(now_ms()) {
            Ok(s) => {
                failures = 0;
                s
            }
            // A transient driver error should not end a long recording.
            Err(e) if failures < MAX_FAILURES => {
                failures += 1;
                let _ = writeln!(
                    crate::output::stderr(),
                    "vram record: sample failed ({e}); retrying"
                );
                next += args.interval;
                std::thread::sleep(args.interval);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        writer.append(&sample)?;
        n += 1;
        if let Some(w) = watch.as_mut() {
            for f in w.observe(&sample) {
                let _ = writeln!(
                    crate::output::stderr(),
                    "vram record: leak suspected: {}",
                    describe(&f)
                );
            }
        }
        next += args.interval;
        // Sleep in short slices so Ctrl-C is handled promptly.
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
        }
        if Instant::now() > next + args.interval {
            next = Instant::now(); // fell behind (suspend, slow NVML): don't burst
        }
    }
    let n = writer.lines();
    let _ = writeln!(
        crate::output::stderr(),
        "vram record: {n} sample{} appended to {}",
        if n == 1 { "" } else { "s" },
        args.out.display()
    );
    if let Some(w) = watch {
        let verdicts = w.finish();
        let mut out = crate::output::stdout();
        if verdicts.is_empty() {
            writeln!(
                out,
                "leak check: too few samples for a verdict (need {} readings over {:.0} s)",
                config.min_points, config.min_span_s
            )?;
        }
        for v in &verdicts {
            writeln!(out, "leak check: {}", describe(&v.finding))?;
            if let (Some(after), false) = (v.flagged_after_s, v.finding.leaking) {
                writeln!(
                    out,
                    "leak check: gpu {} pid {} was flagged by the live check {after:.0} s in; its floor stopped rising since",
                    v.finding.gpu, v.finding.pid
                )?;
            }
        }
    }
    Ok(())
}
