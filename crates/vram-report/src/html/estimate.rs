//! The estimate pages: a full step, a LoRA/QLoRA step, a checkpoint's parameters.

use vram_model::fmt::{bytes, thousands};
use vram_model::setup::Mode;

use super::svg::{bar_chart, esc, line_chart, nice_max_bytes, Line};
use super::{bytes3, kv, p, text_table, ul};
use crate::estimate::{EstimateReport, WeightsReport};
use crate::finetune::FinetuneReport;
use crate::parts::{Bound, Bytes};
use crate::text::speed_line;
use vram_plan::suggest::Suggestion;

/// A signed size: "−90.4 GiB" for a shortfall.
fn signed(v: i64) -> String {
    if v < 0 {
        format!("\u{2212}{}", bytes(v.unsigned_abs()))
    } else {
        bytes(v as u64)
    }
}

/// (name, shown, exact) for a size.
fn size(name: &str, b: u64) -> (String, String, String) {
    (name.into(), bytes(b), format!("{} bytes", thousands(b)))
}

/// The rows under a peak, as the text's `needed_and_total` words them: "needed" and a total
/// of needed plus the context where idle cached segments sit at the peak, else the total
/// alone; then the headroom.
fn needed_total_headroom(
    rows: &mut Vec<(String, String, String)>,
    reserved: u64,
    needed: u64,
    total: u64,
    headroom: i64,
) {
    if needed < reserved {
        rows.push(size("needed (smallest device that runs it)", needed));
        rows.push(size("device total (needed plus CUDA context)", total));
    } else {
        rows.push(size("device total (what nvidia-smi shows)", total));
    }
    rows.push((
        "headroom".into(),
        signed(headroom),
        format!("{headroom} bytes"),
    ));
}

/// (name, shown, exact) for a count.
fn count(name: &str, n: u64) -> (String, String, String) {
    (name.into(), thousands(n), n.to_string())
}

/// (name, shown) for a word.
fn word(name: &str, w: &str) -> (String, String, String) {
    (name.into(), w.into(), w.into())
}

/// The verdict paragraph and the GPU line.
fn gpu_and_verdict(gpu: &crate::parts::GpuRef, fits: bool, verdict: &str) -> String {
    let mut o = p("gpu", "", &format!("GPU: {}", gpu.with_memory()));
    o.push_str(&p("verdict", if fits { "good" } else { "bad" }, verdict));
    o
}

/// The "would fit with" list, the flags as code; the same sentences as the text.
fn suggestions(s: &Option<Vec<Suggestion>>, lines: &[String]) -> String {
    let Some(s) = s else {
        return String::new();
    };
    if s.is_empty() {
        return super::ul("suggestions", lines);
    }
    let mut o = String::from("<ul id=\"suggestions\">");
    for x in s {
        let detail = x
            .detail
            .as_ref()
            .map_or(String::new(), |d| format!(" ({})", esc(d)));
        o.push_str(&format!(
            "<li>would fit with <code>{}</code>{detail}: {} on the device</li>",
            esc(&x.flags),
            esc(&bytes(x.total_bytes))
        ));
    }
    o.push_str("</ul>");
    o
}

fn breakdown(b: &Bytes) -> String {
    let mut items: Vec<(String, f64)> = b
        .iter()
        .map(|(k, v)| (k.replace('_', " "), v as f64))
        .collect();
    if items.is_empty() {
        return String::new();
    }
    items.sort_by(|a, b| b.1.total_cmp(&a.1));
    format!(
        "<h2>Breakdown at peak</h2>{}",
        bar_chart(&items, &bytes3, None)
    )
}

/// The page of a full training or inference step.
pub(super) fn estimate(r: &EstimateReport) -> String {
    let mut o = format!("<h2>Estimate for {}</h2>", esc(&r.model));
    o.push_str(&p("setup", "", &r.description));
    o.push_str(&gpu_and_verdict(&r.gpu, r.fits, &r.verdict()));
    o.push_str(&ul("fit", &r.fit_lines()));
    o.push_str(&suggestions(&r.suggestions, &r.suggestion_lines()));
    // The figures of the text's table, each named once.
    let mut rows = vec![count("parameters", r.params)];
    if r.params_per_gpu != r.params {
        rows.push(count("parameters per GPU", r.params_per_gpu));
    }
    if r.trainable_params > 0 {
        rows.push(count("trainable parameters", r.trainable_params));
    }
    rows.push(size("peak allocated", r.peak_bytes));
    rows.push(word("peak at", &r.peak_phase));
    let reserved = match r.generate_call() {
        "" => "peak reserved (max_memory_reserved)".to_string(),
        call => format!("peak reserved (max_memory_reserved {call})"),
    };
    rows.push(size(&reserved, r.reserved_bytes));
    needed_total_headroom(
        &mut rows,
        r.reserved_bytes,
        r.needed_bytes,
        r.total_bytes,
        r.headroom_bytes,
    );
    rows.push(word("weights format", &r.weights));
    if let Some(l) = &r.weights_load {
        if l.dequantized {
            rows.push(size("weights held dequantized", l.held_bytes));
        } else if l.dequantized_at_load.is_some() || l.not_loaded.is_some() {
            rows.push(size("weights held", l.held_bytes));
        } else {
            rows.push(size("weights held as stored", l.held_bytes));
        }
        rows.push(word("how the weights are loaded", &l.why));
        if let Some(part) = &l.dequantized_at_load {
            rows.push(word("dequantized at load", part));
        }
        if let Some(part) = &l.not_loaded {
            rows.push(word("held as built, not loaded from the checkpoint", part));
        }
        rows.push(size("weights as stored", l.stored_bytes));
        rows.push(size("weights dequantized", l.dequantized_bytes));
    } else {
        rows.push(size("weights as stored", r.weights_bytes));
    }
    if let Some(k) = &r.kernels {
        rows.push(word(
            "kernels assumed",
            &format!("{} ({})", k.packages, k.source),
        ));
    }
    if let (Some(a), Some(t)) = (r.cache_after_prefill_bytes, r.cache_bytes_per_token) {
        rows.push(size("cache after the prefill", a));
        if t < 0 {
            // As the text says: sliding layers keep the prefill's whole K/V tensor until the
            // first decode step's `cat`.
            rows.push(size(
                "cache freed (net) by the first decode step: sliding layers keep their window",
                t.unsigned_abs(),
            ));
        } else {
            rows.push((
                "cache added per decode step".into(),
                signed(t),
                format!("{t} bytes"),
            ));
        }
    }
    rows.push(word(
        "mixed-precision layout",
        &super::plan::name_of(r.amp_style),
    ));
    rows.push(word("allocator replayed", r.allocator.name()));
    if r.setup.parallel.pp > 1 {
        rows.push(count("pipeline rank reported", r.pipeline_rank));
    }
    o.push_str(&kv("figures", &rows));
    // The text's `note:`, `mechanism:`, `assumed:` and `models:` lines.
    let mut lines: Vec<String> = Vec::new();
    lines.extend(r.detail_lines());
    lines.extend(crate::notes::lines(&r.notes));
    lines.extend(r.mechanisms.iter().map(|m| format!("mechanism: {m}")));
    lines.push(r.assumed_line());
    lines.push(format!("models: {}", r.assumes.line()));
    o.push_str("<h2>Notes</h2>");
    o.push_str(&ul("notes", &lines));
    if let Some(s) = &r.serving {
        o.push_str("<h2>Serving speed (transformers generate, one GPU)</h2>");
        o.push_str(&p("speed", "", &speed_line(s)));
        let ms = |s: f64| format!("{:.1} ms", s * 1e3);
        let secs = |s: f64| format!("{s:.3} s");
        o.push_str(&kv(
            "serving",
            &[
                ("prefill".into(), secs(s.prefill_s), s.prefill_s.to_string()),
                (
                    "generate's set-up (host)".into(),
                    ms(s.setup_s),
                    s.setup_s.to_string(),
                ),
                (
                    "prefill, host time".into(),
                    ms(s.prefill_host_s),
                    s.prefill_host_s.to_string(),
                ),
                (
                    "prefill, GPU time".into(),
                    ms(s.prefill_gpu_s),
                    s.prefill_gpu_s.to_string(),
                ),
                (
                    "decode, per token".into(),
                    ms(s.decode_token_s),
                    s.decode_token_s.to_string(),
                ),
                (
                    "decode, GPU time per token".into(),
                    ms(s.decode_gpu_s),
                    s.decode_gpu_s.to_string(),
                ),
                (
                    "decode, host time per token".into(),
                    ms(s.decode_host_s),
                    s.decode_host_s.to_string(),
                ),
                (
                    "kernels launched per decode step".into(),
                    thousands(s.decode_kernels.round() as u64),
                    s.decode_kernels.to_string(),
                ),
                (
                    "Python calls per decode step".into(),
                    thousands(s.decode_calls.round() as u64),
                    s.decode_calls.to_string(),
                ),
                (
                    "read and written per decode step".into(),
                    format!("{:.2} GB", s.decode_bytes / 1e9),
                    s.decode_bytes.to_string(),
                ),
                (
                    "decode bound by".into(),
                    match s.decode_bound {
                        Bound::Gpu => "the GPU",
                        Bound::Host => "the host (kernel launches)",
                    }
                    .into(),
                    String::new(),
                ),
                (
                    "whole generate call".into(),
                    secs(s.generate_s),
                    s.generate_s.to_string(),
                ),
                (
                    "decode tokens/s".into(),
                    format!("{:.0}", s.decode_tokens_per_s),
                    s.decode_tokens_per_s.to_string(),
                ),
                ("checked against".into(), s.checks.clone(), String::new()),
            ],
        ));
    }
    o.push_str(&breakdown(&r.breakdown));
    if let Some(tl) = &r.timeline {
        let labels: Vec<String> = tl.iter().map(|e| e.label.clone()).collect();
        let mut lines = vec![
            Line {
                name: "live bytes (entering the phase)".into(),
                points: tl
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i as f64, Some(e.live_bytes as f64)))
                    .collect(),
            },
            Line {
                name: "high point within the phase".into(),
                points: tl
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i as f64, Some(e.high_bytes as f64)))
                    .collect(),
            },
        ];
        let g = r.gpu.memory_bytes as f64;
        lines.push(Line {
            name: "GPU memory".into(),
            points: vec![(0.0, Some(g)), ((tl.len().max(2) - 1) as f64, Some(g))],
        });
        let xf = move |x: f64| labels.get(x.round() as usize).cloned().unwrap_or_default();
        let peak = lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|p| p.1))
            .fold(0.0, f64::max);
        o.push_str("<h2>Live memory over the step</h2>");
        o.push_str(&line_chart(
            &lines,
            &xf,
            &bytes3,
            Some(nice_max_bytes(peak)),
        ));
    }
    if let Mode::Infer(_) = r.setup.mode {
        if let Some(k) = &r.cache_by_kind {
            let rows: Vec<Vec<String>> = k
                .iter()
                .filter(|(_, c)| c.layers > 0)
                .map(|(name, c)| {
                    vec![
                        name.clone(),
                        c.layers.to_string(),
                        bytes(c.after_prefill_bytes),
                        bytes(c.after_decode_bytes),
                    ]
                })
                .collect();
            if !rows.is_empty() {
                o.push_str("<h2>Cache by kind of layer</h2>");
                o.push_str(&text_table(
                    "cache",
                    &[
                        "kind",
                        "layers",
                        "after the prefill",
                        "after one decode step",
                    ],
                    &rows,
                ));
            }
        }
    }
    o
}

/// The page of a LoRA/QLoRA step.
pub(super) fn finetune(r: &FinetuneReport) -> String {
    let mut o = format!("<h2>Estimate for {}</h2>", esc(&r.model));
    o.push_str(&p("title", "", &r.title()));
    o.push_str(&p("setup", "", &r.description));
    o.push_str(&gpu_and_verdict(&r.gpu, r.fits, &r.verdict()));
    o.push_str(&ul("fit", &r.fit_lines()));
    o.push_str(&suggestions(&r.suggestions, &r.suggestion_lines()));
    let mut rows = vec![
        count("parameters", r.params),
        count("trainable parameters", r.trainable_params),
        word("base weights format", &r.weights.format),
        size("base weights held", r.weights.total_bytes),
        size("of which quantized", r.weights.quantized_bytes),
        size("peak allocated", r.peak_bytes),
        word("peak at", &r.peak_phase),
        size("peak reserved (max_memory_reserved)", r.reserved_bytes),
    ];
    needed_total_headroom(
        &mut rows,
        r.reserved_bytes,
        r.needed_bytes,
        r.total_bytes,
        r.headroom_bytes,
    );
    o.push_str(&kv("figures", &rows));
    let mut lines: Vec<String> = crate::notes::lines(&r.notes).collect();
    lines.push(crate::finetune::MODELS_LINE.into());
    o.push_str("<h2>Notes</h2>");
    o.push_str(&ul("notes", &lines));
    o.push_str(&breakdown(&r.breakdown));
    let rows: Vec<Vec<String>> = r
        .lora
        .adapted_modules
        .iter()
        .map(|a| {
            vec![
                a.path.clone(),
                a.rank.to_string(),
                a.layers.to_string(),
                thousands(a.params),
            ]
        })
        .collect();
    if !rows.is_empty() {
        o.push_str("<h2>Adapted modules</h2>");
        o.push_str(&text_table(
            "adapters",
            &["module", "rank", "layers", "parameters"],
            &rows,
        ));
    }
    o.push_str("<h2>Assumed</h2>");
    o.push_str(&ul("assumes", &r.assumes));
    o
}

/// The page of a checkpoint's parameters.
pub(super) fn weights(w: &WeightsReport) -> String {
    let mut o = format!("<h2>Parameters of {}</h2>", esc(&w.model));
    o.push_str(&p("setup", "", &w.title()));
    let rows: Vec<Vec<String>> = w
        .dtypes
        .iter()
        .map(|(d, n)| vec![d.to_string(), thousands(n)])
        .collect();
    o.push_str(&text_table("dtypes", &["dtype", "parameters"], &rows));
    o
}
