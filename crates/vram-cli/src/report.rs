//! `vram report INPUT --out FILE.html`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::monitor::BadInput;

/// Arguments of `vram report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// A `vram record` timeline (JSON Lines), or the JSON printed by
    /// `vram top --json`, `vram estimate --json`, `vram plan --json`,
    /// `vram replay --json` or `vram capacity --json`.
    #[arg(required_unless_present = "demo")]
    pub input: Option<PathBuf>,
    /// Where to write the HTML (default: INPUT with `.html`; with --demo,
    /// `vram-demo.html`).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Report on a two-minute simulated recording instead of INPUT.
    #[arg(long, conflicts_with = "input")]
    pub demo: bool,
}

/// Largest input read (1 GiB): a day of one-second samples of the demo's two GPUs is ~80 MB.
const MAX_INPUT: u64 = 1 << 30;

/// 120 one-second samples of the demo machine, as JSON Lines.
fn demo_recording() -> String {
    use vram_monitor::{SimulatedSource, Source};
    let mut src = SimulatedSource::demo();
    let t0 = crate::monitor::now_ms();
    (0..120)
        .filter_map(|k| src.sample(t0 + k * 1000).ok())
        .map(|s| s.to_json_line() + "\n")
        .collect()
}

/// Render the report; an unreadable or unrecognised input is bad input.
pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let (text, name, default_out) = match &args.input {
        Some(input) if !args.demo => {
            let bytes = crate::input::read_bounded(input, "report input", MAX_INPUT)?;
            // `vram estimate --json > e.json` in Windows PowerShell 5 saves UTF-16LE.
            let text = crate::input::decode_text(&bytes, false).ok_or_else(|| {
                BadInput(format!(
                    "report input {} is not UTF-8 or UTF-16 text (a binary file?)",
                    input.display()
                ))
            })?;
            let name = input
                .file_name()
                .map_or_else(|| "input".into(), |n| n.to_string_lossy().into_owned());
            (text, name, input.with_extension("html"))
        }
        _ => (
            demo_recording(),
            "demo recording".to_string(),
            PathBuf::from("vram-demo.html"),
        ),
    };
    let (kind, html) = vram_report::html::render(&text, &name).with_context(|| name.clone())?;
    let out = args.out.clone().unwrap_or(default_out);
    crate::output::write_file(&out, html.as_bytes())?;
    let _ = writeln!(
        crate::output::stderr(),
        "vram report: wrote {} ({})",
        out.display(),
        kind.name()
    );
    Ok(())
}
