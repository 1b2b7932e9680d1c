//! `vram report`: one self-contained HTML file (inline CSS and SVG, no scripts, no network) for
//! a recording or for the JSON of another command.
//!
//! | kind      | recognised by                                                      |
//! |-----------|--------------------------------------------------------------------|
//! | recording | JSON Lines of samples (`t_ms`, `gpus`), or one sample (`vram top --json`) |
//! | replay    | a report of `kind` `replay` (`vram replay --json`)                 |
//! | estimate  | a report of `kind` `estimate`, `finetune` or `weights` (`vram estimate --json`) |
//! | capacity  | a report of `kind` `capacity` (`vram capacity --json`)             |
//! | plan      | a report of `kind` `plan` or `finetune_plan` (`vram plan --json`)  |
//! | batch     | a report of `kind` `batch` (`vram batch --json`)                   |
//! | checkpoint | a report of `kind` `checkpoint` (`vram checkpoint --json`)        |
//! | doctor    | `vram doctor --json` ([`crate::doctor::Answer`])                    |
//!
//! Every page but a recording's renders the typed report ([`crate::Report`]): the same
//! fields and the same sentences ([`crate::text`]) as the text output, sizes in its format.

mod capacity;
mod doctor;
mod estimate;
mod plan;
mod steps;
pub mod svg;

use serde_json::Value;
use vram_monitor::leak::{LeakConfig, LeakDetector};
use vram_monitor::view::human_bytes;
use vram_monitor::{timeline, Sample};

use crate::error::{Error, Result};
use crate::Report;
use svg::{esc, line_chart, nice_max_bytes, Line};

/// What a page was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// A `vram record` timeline or a `vram top --json` sample.
    Recording,
    /// `vram estimate --json`.
    Estimate,
    /// `vram plan --json`.
    Plan,
    /// `vram replay --json`.
    Replay,
    /// `vram capacity --json`.
    Capacity,
    /// `vram batch --json`.
    Batch,
    /// `vram checkpoint --json`.
    Checkpoint,
    /// `vram doctor --json`.
    Doctor,
}

impl PageKind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            PageKind::Recording => "recording",
            PageKind::Estimate => "estimate",
            PageKind::Plan => "plan",
            PageKind::Replay => "replay",
            PageKind::Capacity => "capacity",
            PageKind::Batch => "batch",
            PageKind::Checkpoint => "checkpoint",
            PageKind::Doctor => "doctor",
        }
    }
}

enum Input {
    Recording(Vec<Sample>, bool),
    Report(Report),
    Doctor(crate::doctor::Answer),
}

fn unrec(reason: impl Into<String>) -> Error {
    Error::Unrecognised {
        reason: reason.into(),
    }
}

fn detect(text: &str) -> Result<Input> {
    if text.trim().is_empty() {
        return Err(unrec("the file is empty"));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => {
            if m.contains_key("schema_version") {
                return Ok(Input::Report(Report::from_json(text)?));
            }
            if m.contains_key("t_ms") && m.contains_key("gpus") {
                let s: Sample = serde_json::from_value(Value::Object(m))
                    .map_err(|e| unrec(format!("a sample with bad fields: {e}")))?;
                Ok(Input::Recording(vec![s], false))
            } else if m.contains_key("model") || m.contains_key("policies") {
                Err(unrec(
                    "a JSON object without schema_version: not the --json of this vram's estimate, capacity or plan (an older vram's? run the command again)",
                ))
            } else if crate::doctor::looks_like(&m) {
                Ok(Input::Doctor(crate::doctor::Answer::from_value(
                    Value::Object(m),
                )?))
            } else {
                let keys: Vec<&str> = m.keys().map(String::as_str).take(8).collect();
                Err(unrec(format!(
                    "JSON object with keys [{}] is not the --json of vram estimate, plan, batch, checkpoint, replay, capacity, doctor or top, nor a recording",
                    keys.join(", ")
                )))
            }
        }
        // `vram models --json` and `vram gpus --json` are lists of catalog entries.
        Ok(Value::Array(a))
            if a.first().and_then(Value::as_object).is_some_and(|o| {
                o.contains_key("id")
                    && (o.contains_key("params") || o.contains_key("memory_bytes"))
            }) =>
        {
            Err(unrec(
                "the --json of vram models or vram gpus (a catalog listing) has no page: its text and its JSON are the whole answer",
            ))
        }
        Ok(_) => Err(unrec("JSON that is not an object")),
        Err(_) => {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if !first.trim_start().starts_with('{') {
                return Err(unrec(
                    "neither JSON nor JSON Lines (CSV and other formats are not supported)",
                ));
            }
            let tl = timeline::parse(text).map_err(|e| unrec(e.to_string()))?;
            if tl.samples.is_empty() {
                return Err(unrec("no complete sample in the recording"));
            }
            Ok(Input::Recording(tl.samples, tl.torn_tail))
        }
    }
}

/// The kind of `text` without rendering it.
///
/// # Errors
/// [`Error::Unrecognised`] when it is none of the known kinds.
pub fn detect_kind(text: &str) -> Result<PageKind> {
    Ok(match detect(text)? {
        Input::Recording(..) => PageKind::Recording,
        Input::Report(r) => page_kind(&r),
        Input::Doctor(_) => PageKind::Doctor,
    })
}

fn page_kind(r: &Report) -> PageKind {
    match r {
        Report::Estimate(_) | Report::Finetune(_) | Report::Weights(_) => PageKind::Estimate,
        Report::Capacity(_) => PageKind::Capacity,
        Report::Plan(_) | Report::FinetunePlan(_) => PageKind::Plan,
        Report::Batch(_) => PageKind::Batch,
        Report::Checkpoint(_) => PageKind::Checkpoint,
        Report::Replay(_) => PageKind::Replay,
    }
}

/// Renders `text` (the content of the input file called `name`) as one HTML document. Returns
/// the kind and the HTML.
///
/// # Errors
/// [`Error::Unrecognised`] when the input is not recognised.
pub fn render(text: &str, name: &str) -> Result<(PageKind, String)> {
    let (kind, body) = match detect(text)? {
        Input::Recording(samples, torn) => (PageKind::Recording, recording(&samples, torn)),
        Input::Report(r) => (page_kind(&r), report(&r)),
        Input::Doctor(a) => (PageKind::Doctor, doctor::doctor(&a)),
    };
    Ok((
        kind,
        page(
            &format!("vram report: {} ({})", name, kind.name()),
            kind,
            &body,
        ),
    ))
}

/// The page of a report, without the document around it.
pub fn report(r: &Report) -> String {
    match r {
        Report::Estimate(e) => estimate::estimate(e),
        Report::Finetune(f) => estimate::finetune(f),
        Report::Weights(w) => estimate::weights(w),
        Report::Capacity(c) => capacity::capacity(c),
        Report::Plan(p) => plan::plan(p),
        Report::FinetunePlan(p) => plan::finetune_plan(p),
        Report::Batch(b) => steps::batch(b),
        Report::Checkpoint(c) => steps::checkpoint(c),
        Report::Replay(r) => steps::replay(r),
    }
}

/// One HTML document of a report (`vram report`, or a library caller holding a [`Report`]).
pub fn document(r: &Report, title: &str) -> String {
    let kind = page_kind(r);
    page(title, kind, &report(r))
}

const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:980px;color:#222;padding:0 12px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.kv td:first-child{color:#555}.bad{color:#b00020;font-weight:600}.good{color:#007a33;font-weight:600}\
.muted{color:#777}td.cmd{text-align:left}svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}\
div.wide{max-width:100%;overflow-x:auto}code{font-size:13px}";

fn page(title: &str, kind: PageKind, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta name=\"generator\" content=\"vram report\"><title>{t}</title><style>{CSS}</style></head>\
<body data-kind=\"{k}\"><h1>{t}</h1>\n{body}\n<p class=\"muted\">Generated by vram report; self-contained, works offline.</p></body></html>\n",
        t = esc(title),
        k = kind.name()
    )
}

/// A paragraph with an id.
fn p(id: &str, class: &str, text: &str) -> String {
    if class.is_empty() {
        format!("<p id=\"{id}\">{}</p>", esc(text))
    } else {
        format!("<p class=\"{class}\" id=\"{id}\">{}</p>", esc(text))
    }
}

/// A list of sentences with an id.
fn ul(id: &str, items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut o = format!("<ul id=\"{id}\">");
    for i in items {
        o.push_str(&format!("<li>{}</li>", esc(i)));
    }
    o.push_str("</ul>");
    o
}

/// The Notes section of a report's `notes`: the text's `note:` lines ([`crate::notes::lines`]);
/// nothing where there are none.
fn notes(notes: &[String]) -> String {
    if notes.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = crate::notes::lines(notes).collect();
    format!("<h2>Notes</h2>{}", ul("notes", &lines))
}

/// A two-column table of (name, shown value, exact value for the tooltip).
fn kv(id: &str, rows: &[(String, String, String)]) -> String {
    let mut o = format!("<table class=\"kv\" id=\"{id}\">");
    for (k, v, exact) in rows {
        o.push_str(&format!(
            "<tr><td>{}</td><td title=\"{}\">{}</td></tr>",
            esc(k),
            esc(exact),
            esc(v)
        ));
    }
    o.push_str("</table>");
    o
}

/// Thousands separators on a decimal string (`-1234` → `-1,234`).
fn group(digits: &str) -> String {
    let (sign, d) = digits.strip_prefix('-').map_or(("", digits), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn bytes_fmt(v: f64) -> String {
    human_bytes(v.max(0.0) as u64)
}

/// Sizes as the text output prints them.
fn bytes3(v: f64) -> String {
    vram_model::fmt::bytes(v.max(0.0) as u64)
}

/// A table of text cells under a header.
fn text_table(id: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut o = format!("<div class=\"wide\"><table id=\"{id}\"><tr>");
    for h in head {
        o.push_str(&format!("<th>{}</th>", esc(h)));
    }
    o.push_str("</tr>");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            o.push_str(&format!("<td>{}</td>", esc(c)));
        }
        o.push_str("</tr>");
    }
    o.push_str("</table></div>");
    o
}

/// Bar labels made unique: a label that repeats gets its row number.
fn unique(mut labels: Vec<String>) -> Vec<String> {
    let dup: Vec<bool> = labels
        .iter()
        .map(|l| labels.iter().filter(|m| *m == l).count() > 1)
        .collect();
    for (i, l) in labels.iter_mut().enumerate() {
        if dup[i] {
            *l = format!("#{} {l}", i + 1);
        }
    }
    labels
}

fn recording(samples: &[Sample], torn: bool) -> String {
    let t0 = samples.first().map_or(0, |s| s.t_ms);
    let t1 = samples.last().map_or(0, |s| s.t_ms);
    let secs = |t: u64| (t.saturating_sub(t0)) as f64 / 1000.0;
    let span_s = secs(t1);
    let xf = move |x: f64| {
        if span_s < 10.0 {
            format!("{x:.1} s")
        } else if span_s < 600.0 {
            format!("{x:.0} s")
        } else {
            format!("{:.1} min", x / 60.0)
        }
    };
    let mut o = String::from("<h2>Recording</h2><table class=\"kv\">");
    o.push_str(&format!(
        "<tr><td>samples</td><td id=\"n-samples\">{}</td></tr><tr><td>duration</td><td>{:.1} s</td></tr><tr><td>source</td><td>{}</td></tr>",
        samples.len(),
        secs(t1),
        esc(samples.first().map_or("?", |s| s.source.as_str()))
    ));
    if torn {
        o.push_str("<tr><td>note</td><td>an incomplete last line was ignored</td></tr>");
    }
    o.push_str("</table>");

    let mut det = LeakDetector::new(LeakConfig::default());
    samples.iter().for_each(|s| det.observe(s));
    let findings = det.assess();

    let mut gpu_ids: Vec<(u32, String, u64)> = Vec::new();
    for s in samples {
        for g in &s.gpus {
            if !gpu_ids.iter().any(|x| x.0 == g.index) {
                gpu_ids.push((g.index, g.name.clone(), g.memory_total_bytes));
            }
        }
    }
    for (idx, name, total) in gpu_ids {
        o.push_str(&format!(
            "<h2 id=\"gpu-{idx}\">GPU {idx}: {}</h2>",
            esc(&name)
        ));
        let used = Line {
            name: "used".into(),
            points: samples
                .iter()
                .map(|s| {
                    (
                        secs(s.t_ms),
                        s.gpus
                            .iter()
                            .find(|g| g.index == idx)
                            .map(|g| g.memory_used_bytes as f64),
                    )
                })
                .collect(),
        };
        o.push_str(&line_chart(&[used], &xf, &bytes_fmt, Some(total as f64)));
        let util: Vec<(f64, Option<f64>)> = samples
            .iter()
            .map(|s| {
                (
                    secs(s.t_ms),
                    s.gpus
                        .iter()
                        .find(|g| g.index == idx)
                        .and_then(|g| g.utilization_pct)
                        .map(f64::from),
                )
            })
            .collect();
        if util.iter().any(|p| p.1.is_some()) {
            o.push_str("<p class=\"muted\">Utilisation (%)</p>");
            o.push_str(&line_chart(
                &[Line {
                    name: "utilisation %".into(),
                    points: util,
                }],
                &xf,
                &|v| format!("{v:.0}%"),
                Some(100.0),
            ));
        }
        let mut pids: Vec<(u32, String)> = Vec::new();
        for s in samples {
            if let Some(g) = s.gpus.iter().find(|g| g.index == idx) {
                for p in &g.processes {
                    if !pids.iter().any(|x| x.0 == p.pid) {
                        pids.push((p.pid, p.command.clone()));
                    }
                }
            }
        }
        if pids.is_empty() {
            continue;
        }
        let lines: Vec<Line> = pids
            .iter()
            .map(|(pid, cmd)| Line {
                name: format!("{pid} {cmd}"),
                points: samples
                    .iter()
                    .map(|s| {
                        (
                            secs(s.t_ms),
                            s.gpus
                                .iter()
                                .find(|g| g.index == idx)
                                .and_then(|g| g.processes.iter().find(|p| p.pid == *pid))
                                .and_then(|p| p.gpu_memory_bytes)
                                .map(|b| b as f64),
                        )
                    })
                    .collect(),
            })
            .collect();
        let peak = lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|p| p.1))
            .fold(0.0, f64::max);
        o.push_str("<p class=\"muted\">Per process</p>");
        o.push_str(&line_chart(
            &lines,
            &xf,
            &bytes_fmt,
            Some(nice_max_bytes(peak)),
        ));
    }

    o.push_str("<h2>Leak check</h2><p class=\"muted\">The floor of each process's memory (its lowest reading in each twelfth of the recording) must trend upwards (Mann-Kendall, one-sided α = 0.01) and have risen in each of the last four twelfths, by 64 MiB in all, over at least 90 s of readings.</p>");
    if findings.is_empty() {
        o.push_str("<p>Too few readings for a verdict.</p>");
    } else {
        o.push_str("<table id=\"leaks\"><tr><th>GPU</th><th>pid</th><th class=\"cmd\">command</th><th>first</th><th>last</th><th>floor slope</th><th>p (floors)</th><th>rising stretches</th><th>verdict</th></tr>");
        for f in &findings {
            o.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td class=\"cmd\">{}</td><td>{}</td><td>{}</td><td>{}{}/s</td><td>{:.2e}</td><td>{} of 4</td><td class=\"{}\">{}</td></tr>",
                f.gpu,
                f.pid,
                esc(&f.command.chars().take(60).collect::<String>()),
                human_bytes(f.first_bytes),
                human_bytes(f.last_bytes),
                if f.slope_bytes_per_s < 0.0 { "-" } else { "+" },
                human_bytes(f.slope_bytes_per_s.abs() as u64),
                f.whole.p_increasing,
                f.rising_chunks,
                if f.leaking { "bad" } else { "good" },
                if f.leaking { "LEAK" } else { "ok" }
            ));
        }
        o.push_str("</table>");
    }
    o
}
