//! `vram`: GPU memory toolkit. This branch's `main` is minimal; the monitor
//! subcommands live one per module and are wired in here.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod monitor;
mod record;
mod report;
mod serve;
mod top;

#[derive(Parser, Debug)]
#[command(name = "vram", version, about = "GPU memory toolkit for deep learning")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Live GPU memory and utilisation per GPU and per process.
    Top(top::TopArgs),
    /// Record a JSON Lines timeline of samples, optionally checking for leaks.
    Record(record::RecordArgs),
    /// Serve a live web page and Prometheus /metrics on 127.0.0.1.
    Serve(serve::ServeArgs),
    /// Render a recording, estimate, plan or replay as one offline HTML file.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Top(a) => top::run(a),
        Command::Record(a) => record::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Report(a) => report::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = monitor::exit_code(&e);
            if code != 0 {
                eprintln!("vram: {e:#}");
            }
            ExitCode::from(code)
        }
    }
}
