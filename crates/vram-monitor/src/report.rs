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
//!
//! Every other key is rendered generically, and optional keys that are
//! missing simply leave their section out.

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
}

impl Kind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Recording => "recording",
            Kind::Estimate => "estimate",
            Kind::Plan => "plan",
            Kind::Replay => "replay",
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
                    "JSON object with keys [{}] is not an estimate, plan, replay or sample",
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
.muted{color:#777}td.cmd{text-align:left}svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}";

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

fn kv_table(m: &Map<String, Value>, skip: &[&str]) -> String {
    let mut o = String::from("<table class=\"kv\">");
    let mut any = false;
    for (k, v) in m {
        if skip.contains(&k.as_str()) || v.is_array() || v.is_object() {
            continue;
        }
        any = true;
        o.push_str(&format!(
            "<tr><td>{}</td><td title=\"{}\">{}</td></tr>",
            esc(k),
            esc(&v.to_string()),
            esc(&fmt_value(k, v))
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
    if let Some(fits) = m.get("fits").and_then(Value::as_bool) {
        o.push_str(&if fits {
            "<p class=\"good\" id=\"verdict\">Fits in GPU memory.</p>".to_string()
        } else {
            "<p class=\"bad\" id=\"verdict\">Does not fit in GPU memory.</p>".to_string()
        });
    }
    o.push_str(&kv_table(m, &[]));
    // `breakdown` is category → bytes; an array of {name, bytes}-like
    // objects is accepted too (first string field, first byte field).
    let breakdown: Option<Vec<(String, f64)>> = match m.get("breakdown") {
        Some(Value::Object(b)) => Some(
            b.iter()
                .filter_map(|(k, v)| num(Some(v)).map(|f| (k.clone(), f)))
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
        let highs: Vec<(f64, Option<f64>)> = tl
            .iter()
            .enumerate()
            .map(|(i, e)| (i as f64, num(e.get("high_bytes"))))
            .collect();
        let mut lines = vec![
            Line {
                name: "live bytes".into(),
                points: pts,
            },
            Line {
                name: "high in phase".into(),
                points: highs,
            },
        ];
        let gpu = num(m.get("gpu_memory_bytes"));
        if let Some(g) = gpu {
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

fn columns(rows: &[Value], preferred: &[&str]) -> Vec<String> {
    let mut cols: Vec<String> = preferred
        .iter()
        .filter(|p| rows.iter().any(|r| r.get(**p).is_some()))
        .map(|s| s.to_string())
        .collect();
    for r in rows {
        if let Value::Object(m) = r {
            for k in m.keys() {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    cols
}

fn table(rows: &[Value], cols: &[String], id: &str) -> String {
    let mut o = format!("<table id=\"{id}\"><tr>");
    for c in cols {
        o.push_str(&format!("<th>{}</th>", esc(c)));
    }
    o.push_str("</tr>");
    for r in rows {
        o.push_str("<tr>");
        for c in cols {
            let cell = r.get(c).map_or("—".into(), |v| fmt_value(c, v));
            o.push_str(&format!("<td>{}</td>", esc(&cell)));
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
    o
}

/// A short bar label from the row's `keys`: strings as they are, numbers
/// after a short prefix (`tp8 pp2 dp4 mb1 z1`).
fn row_label(r: &Value, i: usize, keys: &[&str]) -> String {
    fn short(k: &str) -> &str {
        match k {
            "micro_batch" => "mb",
            "zero_stage" => "z",
            "grad_accum" => "ga",
            k => k,
        }
    }
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            r.get(*k).map(|v| match v {
                Value::String(s) => s.clone(),
                v => format!("{}{}", short(k), fmt_value(k, v)),
            })
        })
        .collect();
    if parts.is_empty() {
        format!("#{}", i + 1)
    } else {
        parts.join(" ")
    }
}

fn plan(m: &Map<String, Value>) -> String {
    let rows: Vec<Value> = m
        .get("plans")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut o = format!("<h2>{} parallelism plans</h2>", rows.len());
    o.push_str(&kv_table(m, &[]));
    if rows.is_empty() {
        o.push_str("<p class=\"muted\">The plan lists no configurations.</p>");
        return o;
    }
    let cols = columns(
        &rows,
        &[
            "tp",
            "pp",
            "dp",
            "micro_batch",
            "grad_accum",
            "zero_stage",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "peak_bytes_per_gpu",
        ],
    );
    o.push_str(&table(&rows, &cols, "plans"));
    let label_keys = ["tp", "pp", "dp", "micro_batch", "zero_stage"];
    for (key, title, f) in [
        (
            "tokens_per_s",
            "Throughput (tokens/s)",
            &(|v: f64| format!("{v:.0}")) as &dyn Fn(f64) -> String,
        ),
        ("peak_bytes_per_gpu", "Peak memory per GPU", &bytes_fmt),
        ("mfu", "Model FLOPs utilisation", &|v: f64| {
            format!("{:.1}%", v * 100.0)
        }),
    ] {
        let items: Vec<(String, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| num(r.get(key)).map(|v| (row_label(r, i, &label_keys), v)))
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
    o.push_str(&kv_table(m, &[]));
    if rows.is_empty() {
        o.push_str("<p class=\"muted\">The replay lists no policies.</p>");
        return o;
    }
    let cols = columns(
        &rows,
        &["name", "peak_allocated_bytes", "peak_reserved_bytes"],
    );
    o.push_str(&table(&rows, &cols, "policies"));
    for (key, title) in [
        ("peak_reserved_bytes", "Peak reserved"),
        ("peak_allocated_bytes", "Peak allocated"),
    ] {
        let items: Vec<(String, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| num(r.get(key)).map(|v| (row_label(r, i, &["name"]), v)))
            .collect();
        if !items.is_empty() {
            o.push_str(&format!("<h2>{title}</h2>"));
            o.push_str(&bar_chart(&items, &bytes_fmt, None));
        }
    }
    let frag: Vec<(String, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let a = num(r.get("peak_allocated_bytes"))?;
            let res = num(r.get("peak_reserved_bytes"))?;
            Some((row_label(r, i, &["name"]), res - a))
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
