//! `vram report`: one self-contained HTML file (inline CSS and SVG, no
//! scripts, no network) for a recording or for the JSON of another command.
//!
//! The kind is detected from the keys present:
//!
//! | kind      | recognised by                                   |
//! |-----------|-------------------------------------------------|
//! | recording | JSON Lines of samples (`t_ms`, `gpus`), or one sample |
//! | plan      | an object with a `plans` array                  |
//! | replay    | an object with a `policies` array               |
//! | estimate  | an object with `peak_bytes` and `model` or `breakdown` |
//! | capacity  | an object with `kv_cache_tokens` and `starts` (`vram capacity --json`) |
//!
//! Every other key is rendered generically, and optional keys that are
//! missing simply leave their section out.

mod capacity;

use serde_json::{Map, Value};

use crate::leak::{LeakConfig, LeakDetector};
use crate::svg::{bar_chart, esc, line_chart, nice_max_bytes, Line};
use crate::view::human_bytes;
use crate::{timeline, MonitorError, Result, Sample};

/// What kind of input a report was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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
}

impl Kind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Recording => "recording",
            Kind::Estimate => "estimate",
            Kind::Plan => "plan",
            Kind::Replay => "replay",
            Kind::Capacity => "capacity",
        }
    }
}

enum Input {
    Recording(Vec<Sample>, bool),
    Object(Kind, Map<String, Value>),
}

fn detect(text: &str) -> Result<Input> {
    let unrec = |reason: String| MonitorError::UnrecognisedInput { reason };
    if text.trim().is_empty() {
        return Err(unrec("the file is empty".into()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => {
            let is_arr = |k: &str| m.get(k).is_some_and(Value::is_array);
            if is_arr("plans") {
                Ok(Input::Object(Kind::Plan, m))
            } else if is_arr("policies") {
                Ok(Input::Object(Kind::Replay, m))
            } else if m.contains_key("kv_cache_tokens") && m.contains_key("starts") {
                Ok(Input::Object(Kind::Capacity, m))
            } else if m.contains_key("peak_bytes")
                && (m.contains_key("model") || m.contains_key("breakdown"))
            {
                Ok(Input::Object(Kind::Estimate, m))
            } else if m.contains_key("t_ms") && m.contains_key("gpus") {
                let s: Sample = serde_json::from_value(Value::Object(m))
                    .map_err(|e| unrec(format!("a sample with bad fields: {e}")))?;
                Ok(Input::Recording(vec![s], false))
            } else {
                let keys: Vec<&str> = m.keys().map(String::as_str).take(8).collect();
                Err(unrec(format!(
                    "JSON object with keys [{}] is not an estimate, plan, replay, capacity or sample",
                    keys.join(", ")
                )))
            }
        }
        Ok(_) => Err(unrec("JSON that is not an object".into())),
        Err(_) => {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if !first.trim_start().starts_with('{') {
                return Err(unrec(
                    "neither JSON nor JSON Lines (CSV and other formats are not supported)".into(),
                ));
            }
            let tl = timeline::parse(text).map_err(|e| unrec(e.to_string()))?;
            if tl.samples.is_empty() {
                return Err(unrec("no complete sample in the recording".into()));
            }
            Ok(Input::Recording(tl.samples, tl.torn_tail))
        }
    }
}

/// Detect the kind of `text` without rendering.
///
/// # Errors
/// [`MonitorError::UnrecognisedInput`] when it is none of the known kinds.
pub fn detect_kind(text: &str) -> Result<Kind> {
    Ok(match detect(text)? {
        Input::Recording(..) => Kind::Recording,
        Input::Object(k, _) => k,
    })
}

/// Render `text` (the content of the input file called `name`) as one HTML
/// document. Returns the kind and the HTML.
///
/// ```
/// use vram_monitor::report::{render, Kind};
///
/// let (kind, html) = render(r#"{"plans":[{"tp":8,"pp":1,"dp":4,"tokens_per_s":1000.0}]}"#, "plan.json").unwrap();
/// assert_eq!(kind, Kind::Plan);
/// assert!(html.contains("<svg") && !html.contains("<script"));
/// assert!(render("name,bytes\n", "x.csv").unwrap_err().is_bad_input());
/// ```
///
/// # Errors
/// [`MonitorError::UnrecognisedInput`] when the input is not recognised.
pub fn render(text: &str, name: &str) -> Result<(Kind, String)> {
    let (kind, body) = match detect(text)? {
        Input::Recording(samples, torn) => (Kind::Recording, recording(&samples, torn)),
        Input::Object(Kind::Estimate, m) => (Kind::Estimate, estimate(&m)),
        Input::Object(Kind::Plan, m) => (Kind::Plan, plan(&m)),
        Input::Object(Kind::Capacity, m) => (Kind::Capacity, capacity::capacity(&m)),
        Input::Object(k, m) => (k, replay(&m)),
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

const CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:980px;color:#222;padding:0 12px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.kv td:first-child{color:#555}.bad{color:#b00020;font-weight:600}.good{color:#007a33;font-weight:600}\
.muted{color:#777}td.cmd{text-align:left}svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}\
div.wide{max-width:100%;overflow-x:auto}code{font-size:13px}";

fn page(title: &str, kind: Kind, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta name=\"generator\" content=\"vram report\"><title>{t}</title><style>{CSS}</style></head>\
<body data-kind=\"{k}\"><h1>{t}</h1>\n{body}\n<p class=\"muted\">Generated by vram report; self-contained, works offline.</p></body></html>\n",
        t = esc(title),
        k = kind.name()
    )
}

/// Format a JSON value by its key's name: `*_bytes` as binary units,
/// `*_s` as seconds, `mfu` as a percentage; strings escaped.
pub fn fmt_value(key: &str, v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if key.contains("bytes") && f >= 0.0 {
                human_bytes(f as u64)
            } else if let Some(unit) = key.strip_suffix("_per_s") {
                let unit = unit.rsplit('_').next().unwrap_or(unit);
                format!("{} {unit}/s", group(&format!("{:.0}", f)))
            } else if key == "mfu" || key.ends_with("_ratio") || key.ends_with("_frac") {
                format!("{:.1}%", f * 100.0)
            } else if key.ends_with("_s") {
                format!("{f:.3} s")
            } else if n.is_i64() || n.is_u64() {
                group(&n.to_string())
            } else {
                format!("{f:.4}")
            }
        }
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Null => "—".into(),
        other => {
            let s = other.to_string();
            if s.len() > 80 {
                format!(
                    "{}…",
                    &s[..s.char_indices().nth(80).map_or(s.len(), |c| c.0)]
                )
            } else {
                s
            }
        }
    }
}

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

/// A person's name for a JSON key: `headroom_bytes` is "headroom", `max_micro_batch` is "max
/// micro batch"; a few keys get the words the text output uses.
pub fn key_name(key: &str) -> String {
    let named = match key {
        "params" => "parameters",
        "params_per_gpu" => "parameters per GPU",
        "peak_bytes" => "peak allocated",
        "reserved_bytes" => "peak reserved",
        "total_bytes" => "device total (what nvidia-smi shows)",
        "headroom_bytes" => "headroom",
        "peak_phase" => "peak at",
        "peak_tensor_bytes" => "tensors at peak",
        "max_micro_batch" => "largest micro-batch that fits",
        "max_batch" => "largest batch that fits",
        "max_context" => "longest context that fits",
        "gpu_memory_bytes" => "GPU memory",
        "amp_style" => "mixed-precision layout",
        "cuda_context_source" => "CUDA context",
        "global_batch" => "global batch",
        "gpus_per_node" => "GPUs per node",
        "candidates" => "configurations searched",
        "estimates" => "memory estimates",
        "capacity_bytes" => "capacity",
        "events" => "events",
        "allocations" => "allocations",
        "prefill_s" => "prefill",
        "decode_token_s" => "decode, per token",
        "decode_gpu_s" => "decode, GPU time per token",
        "decode_launch_s" => "decode, launch time per token",
        "generate_overhead_s" => "generate's overhead per token",
        "generate_s" => "whole generate call",
        "decode_tokens_per_s" => "decode tokens/s",
        k => {
            let k = k.strip_suffix("_bytes").unwrap_or(k);
            return k.replace('_', " ");
        }
    };
    named.to_string()
}

/// Format a byte count that may be negative (headroom): "−90.4 GiB".
fn signed_bytes(v: f64) -> String {
    if v < 0.0 {
        format!("\u{2212}{}", bytes_fmt(-v))
    } else {
        bytes_fmt(v)
    }
}

/// The scalar fields of `m` as a two-column table, those named in `first` first (in that
/// order), the others after them.
fn kv_table(m: &Map<String, Value>, first: &[&str], skip: &[&str]) -> String {
    let mut o = String::from("<table class=\"kv\">");
    let mut any = false;
    let ordered = first
        .iter()
        .filter_map(|k| m.get_key_value(*k))
        .chain(m.iter().filter(|(k, _)| !first.contains(&k.as_str())));
    for (k, v) in ordered {
        if skip.contains(&k.as_str()) || v.is_array() || v.is_object() {
            continue;
        }
        any = true;
        let shown = match num(Some(v)) {
            Some(f) if k.contains("bytes") => signed_bytes(f),
            _ => fmt_value(k, v),
        };
        o.push_str(&format!(
            "<tr><td>{}</td><td title=\"{}\">{}</td></tr>",
            esc(&key_name(k)),
            esc(&v.to_string()),
            esc(&shown)
        ));
    }
    o.push_str("</table>");
    if any {
        o
    } else {
        String::new()
    }
}

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|f| f.is_finite())
}

fn bytes_fmt(v: f64) -> String {
    human_bytes(v.max(0.0) as u64)
}

fn estimate(m: &Map<String, Value>) -> String {
    let mut o = String::new();
    let model = m
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed model)");
    o.push_str(&format!("<h2>Estimate for {}</h2>", esc(model)));
    // The setup line of the text output (`description`), then the GPU.
    if let Some(d) = m.get("description").and_then(Value::as_str) {
        o.push_str(&format!("<p id=\"setup\">{}</p>", esc(d)));
    }
    let gpu_name = m
        .get("gpu")
        .and_then(|g| g.get("name").or(Some(g)))
        .and_then(Value::as_str);
    let gpu_bytes = num(m.get("gpu_memory_bytes"));
    if let Some(g) = gpu_name {
        o.push_str(&format!(
            "<p id=\"gpu\">GPU: {}{}</p>",
            esc(g),
            gpu_bytes.map_or(String::new(), |b| format!(" ({})", bytes_fmt(b)))
        ));
    }
    if let Some(fits) = m.get("fits").and_then(Value::as_bool) {
        let head = num(m.get("headroom_bytes"));
        let total = num(m.get("total_bytes"));
        o.push_str(&match (fits, head) {
            (true, Some(h)) => format!(
                "<p class=\"good\" id=\"verdict\">Fits: {} on the device, {} to spare.</p>",
                total.map_or("?".into(), bytes_fmt),
                bytes_fmt(h)
            ),
            (false, Some(h)) => format!(
                "<p class=\"bad\" id=\"verdict\">Does NOT fit: {} on the device, {} short.</p>",
                total.map_or("?".into(), bytes_fmt),
                bytes_fmt(-h)
            ),
            (true, None) => "<p class=\"good\" id=\"verdict\">Fits in GPU memory.</p>".to_string(),
            (false, None) => {
                "<p class=\"bad\" id=\"verdict\">Does not fit in GPU memory.</p>".to_string()
            }
        });
    }
    if let Some(Value::Array(sug)) = m.get("suggestions") {
        if !sug.is_empty() {
            o.push_str("<ul id=\"suggestions\">");
            for s in sug {
                let flags = s.get("flags").and_then(Value::as_str).unwrap_or("");
                let total = num(s.get("total_bytes"));
                o.push_str(&format!(
                    "<li>would fit with <code>{}</code>: {} on the device</li>",
                    esc(flags),
                    total.map_or("?".into(), bytes_fmt)
                ));
            }
            o.push_str("</ul>");
        }
    }
    // The figures in the text's order, then the rest.
    let first = [
        "params",
        "params_per_gpu",
        "peak_bytes",
        "peak_phase",
        "reserved_bytes",
        "total_bytes",
        "headroom_bytes",
        "max_micro_batch",
        "max_batch",
        "max_context",
    ];
    o.push_str(&kv_table(
        m,
        &first,
        &["model", "description", "fits", "gpu_memory_bytes"],
    ));
    // The text's `note:` and `mechanism:` lines (`notes`, `mechanisms`).
    let lines: Vec<String> = ["notes", "mechanisms"]
        .iter()
        .zip(["note", "mechanism"])
        .flat_map(|(k, label)| {
            m.get(*k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(move |t| format!("<li>{label}: {}</li>", esc(t)))
        })
        .collect();
    if !lines.is_empty() {
        o.push_str("<h2>Notes</h2><ul id=\"notes\">");
        o.push_str(&lines.concat());
        o.push_str("</ul>");
    }
    // `serving` (inference): the text's "serving speed" line, as a table.
    if let Some(Value::Object(sv)) = m.get("serving") {
        o.push_str("<h2>Serving speed (transformers generate, one GPU)</h2>");
        o.push_str(&kv_table(
            sv,
            &[
                "prefill_s",
                "decode_token_s",
                "decode_gpu_s",
                "generate_overhead_s",
                "decode_tokens_per_s",
            ],
            &[],
        ));
    }
    // `breakdown` is category → bytes; an array of {name, bytes}-like
    // objects is accepted too (first string field, first byte field).
    let breakdown: Option<Vec<(String, f64)>> = match m.get("breakdown") {
        Some(Value::Object(b)) => Some(
            b.iter()
                .filter_map(|(k, v)| num(Some(v)).map(|f| (key_name(k), f)))
                .collect(),
        ),
        Some(Value::Array(a)) => Some(
            a.iter()
                .filter_map(|e| {
                    let o = e.as_object()?;
                    let label = o.values().find_map(Value::as_str)?.to_string();
                    let bytes = o
                        .iter()
                        .find(|(k, v)| k.contains("bytes") && v.is_number())
                        .and_then(|(_, v)| num(Some(v)))?;
                    Some((label, bytes))
                })
                .collect(),
        ),
        _ => None,
    };
    if let Some(mut items) = breakdown.filter(|b| !b.is_empty()) {
        items.sort_by(|a, b| b.1.total_cmp(&a.1));
        o.push_str("<h2>Breakdown at peak</h2>");
        o.push_str(&bar_chart(&items, &bytes_fmt, None));
    }
    if let Some(Value::Array(tl)) = m.get("timeline") {
        let pts: Vec<(f64, Option<f64>)> = tl
            .iter()
            .enumerate()
            .map(|(i, e)| (i as f64, num(e.get("live_bytes"))))
            .collect();
        let labels: Vec<String> = tl
            .iter()
            .map(|e| {
                e.get("label")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let mut lines = vec![Line {
            name: "live bytes (end of phase)".into(),
            points: pts,
        }];
        if tl.iter().any(|e| e.get("high_bytes").is_some()) {
            lines.push(Line {
                name: "high point within the phase".into(),
                points: tl
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i as f64, num(e.get("high_bytes"))))
                    .collect(),
            });
        }
        if let Some(g) = gpu_bytes {
            lines.push(Line {
                name: "GPU memory".into(),
                points: vec![(0.0, Some(g)), ((tl.len().max(2) - 1) as f64, Some(g))],
            });
        }
        let xf = move |x: f64| labels.get(x.round() as usize).cloned().unwrap_or_default();
        let peak = lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|p| p.1))
            .fold(0.0, f64::max);
        o.push_str("<h2>Live memory over the step</h2>");
        o.push_str(&line_chart(
            &lines,
            &xf,
            &bytes_fmt,
            Some(nice_max_bytes(peak)),
        ));
    }
    o
}

/// One column of a curated table: JSON key, header, and how to show the value.
type Col<'a> = (&'a str, &'a str, &'a dyn Fn(&Value) -> String);

fn table(rows: &[Value], cols: &[Col<'_>], id: &str) -> String {
    let mut o = format!("<div class=\"wide\"><table id=\"{id}\"><tr>");
    for (_, h, _) in cols {
        o.push_str(&format!("<th>{}</th>", esc(h)));
    }
    o.push_str("</tr>");
    for r in rows {
        o.push_str("<tr>");
        for (k, _, f) in cols {
            let cell = r.get(*k).filter(|v| !v.is_null()).map_or("—".into(), f);
            o.push_str(&format!("<td>{}</td>", esc(&cell)));
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

/// The plan's label as `vram plan` prints it (`tp2 pp1 dp32 mb1x16 zero3 sp rc-full:4`), from
/// `label` when the JSON has it, else rebuilt from the fields.
fn plan_label(r: &Value) -> String {
    if let Some(l) = r.get("label").and_then(Value::as_str) {
        return l.to_string();
    }
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut l = format!(
        "tp{} pp{} dp{} mb{}x{} zero{}",
        n("tp"),
        n("pp"),
        n("dp"),
        n("micro_batch"),
        n("grad_accum"),
        n("zero_stage")
    );
    if r.get("sequence_parallel").and_then(Value::as_bool) == Some(true) {
        l.push_str(" sp");
    }
    match r.get("recompute").and_then(Value::as_str) {
        Some("full") => {
            l.push_str(" rc-full");
            if let Some(k) = r.get("recompute_layers").and_then(Value::as_u64) {
                l.push_str(&format!(":{k}"));
            }
        }
        Some("selective") => l.push_str(" rc-sel"),
        _ => {}
    }
    l
}

fn plan(m: &Map<String, Value>) -> String {
    let rows: Vec<Value> = m
        .get("plans")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let model = m.get("model").and_then(Value::as_str).unwrap_or("model");
    let mut o = format!("<h2>Parallelism plans for {}</h2>", esc(model));
    // The header lines of `vram plan`.
    let n = |k: &str| m.get(k).and_then(Value::as_u64);
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("?");
    o.push_str(&format!(
        "<p id=\"setup\">{} ({} parameters) on {} x {} ({} per node), global batch {} x {} tokens; \
         priced as {} with {}; searched {} configurations, {} memory estimates</p>",
        esc(model),
        n("params").map_or("?".into(), |p| group(&p.to_string())),
        n("gpus").unwrap_or(0),
        esc(s("gpu")),
        n("gpus_per_node").unwrap_or(0),
        n("global_batch").unwrap_or(0),
        n("seq").unwrap_or(0),
        esc(s("stack")),
        esc(s("optimizer")),
        n("candidates").map_or("?".into(), |c| group(&c.to_string())),
        n("estimates").map_or("?".into(), |c| group(&c.to_string())),
    ));
    let closest = m.get("closest").filter(|c| c.is_object());
    if rows.is_empty() {
        o.push_str("<p class=\"bad\" id=\"verdict\">Nothing fits.</p>");
    }
    if let Some(Value::Array(sug)) = m.get("suggestions") {
        if !sug.is_empty() {
            o.push_str("<ul id=\"suggestions\">");
            for x in sug.iter().filter_map(Value::as_str) {
                o.push_str(&format!("<li>{}</li>", esc(x)));
            }
            o.push_str("</ul>");
        }
    }
    let shown: Vec<Value> = if rows.is_empty() {
        closest.cloned().into_iter().collect()
    } else {
        rows.clone()
    };
    if shown.is_empty() {
        o.push_str("<p class=\"muted\">The plan lists no configurations.</p>");
        return o;
    }
    let labelled: Vec<Value> = shown
        .iter()
        .zip(unique(shown.iter().map(plan_label).collect()))
        .map(|(r, l)| {
            let mut r = r.clone();
            r["label"] = Value::String(l);
            r
        })
        .collect();
    let text = |v: &Value| fmt_value("", v);
    let secs = |v: &Value| v.as_f64().map_or("—".into(), |f| format!("{f:.3}"));
    let whole = |v: &Value| v.as_f64().map_or("—".into(), |f| group(&format!("{f:.0}")));
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("—".into(), |f| format!("{:.1}%", f * 100.0))
    };
    let tflops = |v: &Value| v.as_f64().map_or("—".into(), |f| format!("{f:.1}"));
    let bytes = |v: &Value| v.as_f64().map_or("—".into(), bytes_fmt);
    let cols: [Col<'_>; 7] = [
        ("label", "configuration", &text),
        ("step_time_s", "step s", &secs),
        ("tokens_per_s", "tokens/s", &whole),
        ("mfu", "MFU", &pct),
        ("tflops_per_gpu", "TFLOP/s/GPU", &tflops),
        ("peak_bytes_per_gpu", "mem/GPU", &bytes),
        ("bound", "bound", &text),
    ];
    if rows.is_empty() {
        o.push_str("<h2>Closest configuration</h2>");
    }
    o.push_str(&table(&labelled, &cols, "plans"));
    for (key, title, f) in [
        (
            "tokens_per_s",
            "Throughput (tokens/s)",
            &(|v: f64| group(&format!("{v:.0}"))) as &dyn Fn(f64) -> String,
        ),
        ("peak_bytes_per_gpu", "Peak memory per GPU", &bytes_fmt),
        ("mfu", "Model FLOPs utilisation", &|v: f64| {
            format!("{:.1}%", v * 100.0)
        }),
    ] {
        let items: Vec<(String, f64)> = labelled
            .iter()
            .filter_map(|r| {
                let l = r.get("label")?.as_str()?.to_string();
                num(r.get(key)).map(|v| (l, v))
            })
            .collect();
        if !items.is_empty() {
            o.push_str(&format!("<h2>{title}</h2>"));
            o.push_str(&bar_chart(&items, f, None));
        }
    }
    o
}

fn replay(m: &Map<String, Value>) -> String {
    let rows: Vec<Value> = m
        .get("policies")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut o = format!("<h2>Allocator replay: {} policies</h2>", rows.len());
    let cap = num(m.get("capacity_bytes"));
    o.push_str(&format!(
        "<p id=\"setup\">{} events ({} allocations){}</p>",
        m.get("events")
            .and_then(Value::as_u64)
            .map_or("?".into(), |e| group(&e.to_string())),
        m.get("allocations")
            .and_then(Value::as_u64)
            .map_or("?".into(), |e| group(&e.to_string())),
        cap.map_or(String::new(), |c| format!(
            "; out of memory is judged at {}",
            bytes_fmt(c)
        ))
    ));
    if let Some(Value::Object(rec)) = m.get("recorded") {
        o.push_str(&format!(
            "<p>as recorded (the allocator that wrote the trace): peak allocated {}, peak reserved {}</p>",
            num(rec.get("peak_allocated_bytes")).map_or("?".into(), bytes_fmt),
            num(rec.get("peak_reserved_bytes")).map_or("?".into(), bytes_fmt)
        ));
    }
    if rows.is_empty() {
        o.push_str("<p class=\"muted\">The replay lists no policies.</p>");
        return o;
    }
    let text = |v: &Value| fmt_value("", v);
    let bytes = |v: &Value| v.as_f64().map_or("—".into(), bytes_fmt);
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("—".into(), |f| format!("{:.2}%", f * 100.0))
    };
    let ratio = |v: &Value| v.as_f64().map_or("—".into(), |f| format!("{f:.3}"));
    let oom = |v: &Value| match v.as_u64() {
        Some(e) => format!("yes (event {})", group(&e.to_string())),
        None => "no".into(),
    };
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|mut r| {
            if let (Some(a), Some(res)) = (
                num(r.get("peak_allocated_bytes")),
                num(r.get("peak_reserved_bytes")),
            ) {
                if a > 0.0 {
                    r["reserved_per_allocated"] = Value::from(res / a);
                }
            }
            let e = r.get("first_oom_event").cloned().unwrap_or(Value::Null);
            r["oom"] = if e.is_null() { Value::Bool(false) } else { e };
            r
        })
        .collect();
    let oom_head = cap.map_or("OOM".to_string(), |c| format!("OOM at {}", bytes_fmt(c)));
    let cols: [Col<'_>; 6] = [
        ("name", "policy", &text),
        ("peak_allocated_bytes", "peak allocated", &bytes),
        ("peak_reserved_bytes", "peak reserved", &bytes),
        ("reserved_per_allocated", "reserved/allocated", &ratio),
        ("fragmentation", "fragmentation", &pct),
        ("oom", &oom_head, &oom),
    ];
    o.push_str(&table(&rows, &cols, "policies"));
    let names = unique(
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                r.get("name")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("#{}", i + 1), str::to_string)
            })
            .collect(),
    );
    for (key, title) in [
        ("peak_reserved_bytes", "Peak reserved"),
        ("peak_allocated_bytes", "Peak allocated"),
    ] {
        let items: Vec<(String, f64)> = rows
            .iter()
            .zip(&names)
            .filter_map(|(r, n)| num(r.get(key)).map(|v| (n.clone(), v)))
            .collect();
        if !items.is_empty() {
            o.push_str(&format!("<h2>{title}</h2>"));
            o.push_str(&bar_chart(&items, &bytes_fmt, None));
        }
    }
    let frag: Vec<(String, f64)> = rows
        .iter()
        .zip(&names)
        .filter_map(|(r, n)| {
            let a = num(r.get("peak_allocated_bytes"))?;
            let res = num(r.get("peak_reserved_bytes"))?;
            Some((n.clone(), res - a))
        })
        .collect();
    if !frag.is_empty() {
        o.push_str("<h2>Reserved but not allocated at peak (fragmentation and cache)</h2>");
        o.push_str(&bar_chart(&frag, &bytes_fmt, None));
    }
    o
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
