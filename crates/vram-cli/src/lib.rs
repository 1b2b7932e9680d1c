//! `vram`: estimate, plan, allocate and watch GPU memory.
//!
//! This crate is only argument parsing, reading files, output and exit codes; the work happens
//! in the library crates. Exit codes: 0 success, 1 internal failure, 2 bad input (clap's usage
//! errors included).
//!
//! The `vram` binary is [`main_from`] on the process's arguments. The same entry point runs
//! in-process with its output captured ([`run_captured`]): the Python binding calls the
//! commands this way, so both give the same JSON and the same one-line errors.

#![forbid(unsafe_code)]

use std::io::Write;

use clap::{Parser, Subcommand};

mod batch;
mod capacity;
mod checkpoint;
mod doctor;
mod estimate;
mod flags;
mod fmt;
mod input;
mod monitor;
pub mod output;
mod plan;
mod record;
mod replay;
mod report;
mod serve;
mod stdin;
mod top;
mod trace;

/// An error caused by the user's input (exit code 2).
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Shorthand for returning a [`BadInput`] error.
#[macro_export]
macro_rules! bad_input {
    ($($arg:tt)*) => { anyhow::Error::new($crate::BadInput(format!($($arg)*))) };
}

#[derive(Debug, Parser)]
#[command(
    name = "vram",
    version,
    about = "Where GPU memory goes, and how to make a job fit.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
enum Command {
    /// Estimate the peak GPU memory of a training or inference step, and where it goes.
    Estimate(estimate::EstimateArgs),
    /// List the built-in models with their parameter counts.
    Models(estimate::ListArgs),
    /// List the GPU catalog.
    Gpus(estimate::ListArgs),
    /// Find the fastest parallel configuration that fits, and write its launch config.
    Plan(plan::PlanArgs),
    /// Pack variable-length sequences into batches whose estimated peak fits.
    Batch(batch::BatchArgs),
    /// What vLLM or SGLang would log at start-up for a model on a GPU: KV cache tokens, concurrency, whether it starts.
    Capacity(capacity::CapacityArgs),
    /// Place activation checkpoints so that a step fits, at the least recomputation.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Why a PyTorch job ran out of GPU memory (its "CUDA out of memory" message), or a vLLM/SGLang
    /// server would not start, and what to change.
    Doctor(doctor::DoctorArgs),
    /// Replay a memory snapshot's alloc/free history through allocator policies.
    Replay(replay::ReplayArgs),
    /// Write a synthetic memory snapshot of a model's training steps.
    Trace(trace::TraceArgs),
    /// Live GPU memory and utilisation per GPU and per process.
    Top(top::TopArgs),
    /// Record a JSON Lines timeline of samples, optionally checking for leaks.
    Record(record::RecordArgs),
    /// Serve a live web page and Prometheus /metrics on 127.0.0.1.
    Serve(serve::ServeArgs),
    /// Render a recording, estimate, plan, capacity or replay as one offline HTML file.
    Report(report::ReportArgs),
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Estimate(a) => estimate::run(&a),
        Command::Models(a) => estimate::models(&a),
        Command::Gpus(a) => estimate::gpus(&a),
        Command::Plan(a) => plan::run(&a),
        Command::Batch(a) => batch::run(&a),
        Command::Capacity(a) => capacity::run(&a),
        Command::Checkpoint(a) => checkpoint::run(&a),
        Command::Doctor(a) => doctor::run(&a),
        Command::Replay(a) => replay::run(&a),
        Command::Trace(a) => trace::run(&a),
        Command::Top(a) => top::run(&a),
        Command::Record(a) => record::run(&a),
        Command::Serve(a) => serve::run(&a),
        Command::Report(a) => report::run(&a),
    }
}

/// Prints a report: its JSON with `--json`, else its text.
fn print(r: &vram_report::Report, json: bool) -> anyhow::Result<()> {
    let mut out = output::stdout();
    if json {
        out.write_all(r.to_json().as_bytes())?;
    } else {
        out.write_all(r.text().as_bytes())?;
    }
    Ok(())
}

/// A report that ran the caching allocator failed: the request or a bad snapshot is bad
/// input (exit 2), anything else is not.
fn run_error(e: vram_report::RunError) -> anyhow::Error {
    match e {
        vram_report::RunError::Report(e) => anyhow::Error::new(e),
        vram_report::RunError::Alloc(a) => replay::classify(a),
        other => anyhow::Error::new(other),
    }
}

fn is_bad_input(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<BadInput>()
            || c.is::<vram_model::Error>()
            || c.is::<vram_plan::Error>()
            || c.is::<vram_report::Error>()
    }) || monitor::exit_code(e) == 2
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs `vram` on `args` (the program name first, as in `std::env::args_os`), writing to
/// [`output::stdout`]/[`output::stderr`]; returns the exit code.
pub fn main_from<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match parse(args) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // Help and version go to stdout.
            if output::is_captured() {
                let _ = write!(output::stdout(), "{}", e.render());
            } else {
                let _ = e.print();
            }
            return 0;
        }
        Err(e) => {
            // Usage errors are bad input, reported on one line like every other error.
            let _ = writeln!(output::stderr(), "vram: {} (see --help)", clap_one_line(&e));
            return 2;
        }
    };
    let _ = output::take_notes();
    let result = run(cli);
    let notes = output::take_notes();
    match result {
        Ok(()) => {
            for n in notes {
                let _ = writeln!(output::stderr(), "note: {n}");
            }
            0
        }
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            // One line, with what was noted on the way (a local folder that shadowed a Hub id).
            let notes: String = notes.iter().map(|n| format!(" (note: {n})")).collect();
            let _ = writeln!(output::stderr(), "vram: {}{notes}", one_line(&e));
            if is_bad_input(&e) {
                2
            } else {
                1
            }
        }
    }
}

/// The command line, with negative numbers taken as values: `--seq -1` and `--fragmentation
/// -0.1` were "unexpected argument '-1' found" with a tip (`-- -1`) that cannot pass a value to
/// an option; now they reach the option's own check, which names it and its range.
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for n in names {
        cmd = cmd.mut_subcommand(n, |c| c.allow_negative_numbers(true));
    }
    let args = join_negative_values(&cmd, args.into_iter().map(Into::into).collect());
    let mut matches = cmd.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// `--opt -1GiB` as `--opt=-1GiB` where `--opt` takes a value: clap takes a negative number
/// as a value ([`parse`]) but not a negative size or duration (`-1GiB`, `-1s`), which it read
/// as the short flag `-1`. The option's own parser then refuses it, naming it.
fn join_negative_values(
    cmd: &clap::Command,
    mut args: Vec<std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let Some(sub) = args
        .get(1)
        .and_then(|a| a.to_str())
        .and_then(|n| cmd.find_subcommand(n))
    else {
        return args;
    };
    let takes_value = |opt: &str| {
        sub.get_arguments().any(|a| {
            let named = match opt.strip_prefix("--") {
                Some(long) => a.get_long() == Some(long),
                None => {
                    opt.len() == 2 && a.get_short().map(String::from).as_deref() == opt.get(1..)
                }
            };
            named && a.get_action().takes_values()
        })
    };
    let mut i = 2;
    while i + 1 < args.len() {
        let (Some(opt), Some(val)) = (args[i].to_str(), args[i + 1].to_str()) else {
            i += 1;
            continue;
        };
        if opt == "--" {
            break;
        }
        let negative = val.len() > 1
            && val.starts_with('-')
            && val[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.');
        if negative && opt.starts_with('-') && !opt.contains('=') && takes_value(opt) {
            let joined = format!("{opt}={val}");
            args.splice(i..i + 2, [std::ffi::OsString::from(joined)]);
        }
        i += 1;
    }
    args
}

/// clap's usage error on one line, with everything it names: the missing arguments and the
/// accepted values sit on the lines after the first (clap 4's `RichFormatter`), so the message
/// is every line before the usage, joined.
fn clap_one_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let parts: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let msg = parts.join(" ");
    let msg = msg.trim_start_matches("error: ");
    if msg.is_empty() {
        "invalid arguments".to_string()
    } else {
        msg.to_string()
    }
}

/// What a command run in-process by [`run_captured`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The exit code the binary would have returned (0, 1 or 2).
    pub code: u8,
    /// What it wrote to standard output.
    pub stdout: Vec<u8>,
    /// What it wrote to standard error (on failure: `vram: ` and the one-line error).
    pub stderr: Vec<u8>,
}

/// Runs `vram` on `args` (without the program name) in this thread, capturing its output.
pub fn run_captured<I, T>(args: I) -> Finished
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv = std::iter::once(std::ffi::OsString::from("vram"))
        .chain(args.into_iter().map(Into::into))
        .collect::<Vec<_>>();
    let (code, stdout, stderr) = output::capture(|| main_from(argv));
    Finished {
        code,
        stdout,
        stderr,
    }
}

/// The error and its causes on one line. Control characters that an input carried into the
/// message (a config's `model_type`, a file name) are written escaped (`\u{1b}`), as are the
/// bidirectional overrides and isolates: a line break would split the line, an escape sequence
/// would reach the terminal, an override would show the line's text in another order.
fn one_line(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for (i, c) in e.chain().enumerate() {
        let text = output::escape_hidden(&c.to_string().replace('\n', " "));
        if i > 0 {
            if s.contains(&text) {
                continue;
            }
            s.push_str(": ");
        }
        s.push_str(&text);
    }
    s
}
