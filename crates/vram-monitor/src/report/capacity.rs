//! The `vram capacity --json` page: what vLLM or SGLang would log at start-up, the per-GPU
//! figures, whether it starts and what to change when it does not, in the words and sizes of
//! the text output (`crates/vram-cli/src/capacity.rs`), so that the three agree.

use serde_json::{Map, Value};

use super::{group, num};
use crate::svg::{bar_chart, esc};

/// Sizes as the text output prints them ([`crate::view::bytes3`], the same function).
pub(super) fn bytes3(b: f64) -> String {
    crate::view::bytes3(b.max(0.0) as u64)
}

fn n(m: &Map<String, Value>, k: &str) -> f64 {
    num(m.get(k)).unwrap_or(0.0)
}

fn thousands(v: f64) -> String {
    group(&format!("{:.0}", v.max(0.0)))
}

/// The page body for `vram capacity --json`.
pub(super) fn capacity(m: &Map<String, Value>) -> String {
    let vllm = m.get("engine").and_then(Value::as_str) != Some("sglang");
    let engine = if vllm { "vLLM" } else { "SGLang" };
    let model = m.get("model").and_then(Value::as_str).unwrap_or("model");
    let mut o = format!("<h2>Serving capacity: {} with {engine}</h2>", esc(model));
    if let Some(d) = m.get("description").and_then(Value::as_str) {
        o.push_str(&format!("<p id=\"setup\">{}</p>", esc(d)));
    }
    // The verdict lines of the text output.
    let len = n(m, "max_model_len");
    if m.get("starts").and_then(Value::as_bool) == Some(true) {
        o.push_str(&format!(
            "<p class=\"good\" id=\"verdict\">starts: {:.2} requests of {} tokens at once</p>",
            n(m, "max_concurrency"),
            thousands(len)
        ));
    } else {
        o.push_str("<p class=\"bad\" id=\"verdict\">does NOT start</p>");
        let fits = n(m, "max_model_len_that_fits");
        o.push_str(&format!(
            "<p id=\"fits\">largest max_model_len that would: {}</p>",
            if fits > 0.0 {
                thousands(fits)
            } else {
                "none (no KV cache fits beside the weights)".into()
            }
        ));
        o.push_str(&match m.get("cheapest_change").and_then(Value::as_object) {
            Some(c) => format!(
                "<p id=\"change\">cheapest change that starts at max_model_len {}: <code>{}</code> ({} tokens, {:.2} requests at once)</p>",
                thousands(len),
                esc(c.get("flags").and_then(Value::as_str).unwrap_or("?")),
                thousands(n(c, "kv_cache_tokens")),
                n(c, "max_concurrency")
            ),
            None => "<p id=\"change\">no single change tried (fp8 KV cache, fp8 weights, TP 2-8, PP 2-4) starts it at this length</p>".into(),
        });
    }
    if let Some(Value::Array(log)) = m.get("log") {
        o.push_str(&format!("<h2>What {engine} would log at start-up</h2>"));
        o.push_str("<pre id=\"log\" style=\"white-space:pre-wrap;overflow-wrap:anywhere\">");
        for l in log.iter().filter_map(Value::as_str) {
            o.push_str(&esc(l));
            o.push('\n');
        }
        o.push_str("</pre>");
    }
    // The text's per-GPU table, row for row.
    let frac = format!(
        "({} {})",
        if vllm {
            "gpu_memory_utilization"
        } else {
            "mem_fraction_static"
        },
        num(m.get("memory_fraction")).map_or("?".into(), |f| f.to_string())
    );
    let inside = if vllm { "" } else { "(inside the reserve)" };
    let rows: [(&str, &str, String); 6] = [
        ("budget", "budget_bytes", frac),
        ("weights", "weights_bytes", String::new()),
        ("non-torch memory", "non_torch_bytes", String::new()),
        (
            "activation peak (profile)",
            "activation_peak_bytes",
            inside.into(),
        ),
        (
            "KV cache",
            "kv_cache_bytes",
            format!(
                "{} tokens, {} {}",
                thousands(n(m, "kv_cache_tokens")),
                thousands(n(m, "kv_cache_blocks")),
                if vllm { "blocks" } else { "pages" }
            ),
        ),
        (
            "CUDA graphs",
            "cuda_graph_bytes",
            if !vllm {
                inside.into()
            } else if m.get("cuda_graph_in_budget").and_then(Value::as_bool) == Some(true) {
                "(inside the budget)".into()
            } else {
                "(beyond the budget)".into()
            },
        ),
    ];
    o.push_str("<h2>Per GPU</h2><table class=\"kv\" id=\"per-gpu\">");
    for (label, key, note) in &rows {
        o.push_str(&format!(
            "<tr><td>{label}</td><td title=\"{} bytes\">{}</td><td class=\"muted\">{}</td></tr>",
            thousands(n(m, key)),
            bytes3(n(m, key)),
            esc(note)
        ));
    }
    o.push_str("</table>");
    // The pool per kind of layer cache, as the text prints it (models with more than one kind).
    if let Some(Value::Array(groups)) = m.get("kv_groups") {
        if groups.len() > 1 {
            o.push_str("<h2>KV cache per layer kind</h2><table class=\"kv\" id=\"kv-groups\">");
            for g in groups.iter().filter_map(Value::as_object) {
                let kind = g.get("kind").and_then(Value::as_str).unwrap_or("?");
                let unit = if let Some(s) = num(g.get("state_slots")) {
                    format!("{} request slots", thousands(s))
                } else if kind == "state" {
                    "one block a request".into()
                } else {
                    format!("{}-token blocks", n(g, "block_size"))
                };
                o.push_str(&format!(
                    "<tr><td>{}</td><td title=\"{} bytes\">{}</td><td class=\"muted\">a page; {} layers in {} group(s) of {}, {}</td></tr>",
                    esc(kind),
                    thousands(n(g, "page_bytes")),
                    bytes3(n(g, "page_bytes")),
                    n(g, "layers"),
                    n(g, "groups"),
                    n(g, "layers_per_group"),
                    esc(&unit)
                ));
            }
            o.push_str("</table>");
        }
    }
    // Where the device goes, against its total.
    let total = n(m, "total_bytes");
    let items: Vec<(String, f64)> = [
        ("weights", "weights_bytes"),
        ("non-torch memory", "non_torch_bytes"),
        ("activation peak (profile)", "activation_peak_bytes"),
        ("KV cache", "kv_cache_bytes"),
        ("CUDA graphs", "cuda_graph_bytes"),
        ("budget", "budget_bytes"),
        ("device total", "total_bytes"),
    ]
    .iter()
    .map(|(l, k)| (l.to_string(), n(m, k)))
    .collect();
    o.push_str("<h2>Per GPU, against the device</h2>");
    o.push_str(&bar_chart(&items, &bytes3, (total > 0.0).then_some(total)));
    if let Some(Value::Array(a)) = m.get("assumes") {
        o.push_str("<h2>Assumed</h2><ul id=\"assumes\">");
        for x in a.iter().filter_map(Value::as_str) {
            o.push_str(&format!("<li>{}</li>", esc(x)));
        }
        o.push_str("</ul>");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::bytes3;
    use crate::report::{render, Kind};

    #[test]
    fn a_refused_job_without_a_change_and_a_minimal_answer_render() {
        let (kind, html) = render(
            r#"{"engine":"sglang","model":"m","starts":false,"kv_cache_tokens":0,"kv_cache_blocks":0,
                "max_model_len":4096,"max_model_len_that_fits":0,"cheapest_change":null,
                "memory_fraction":0.6,"total_bytes":25769803776,"weights_bytes":26843545600,
                "log":["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]}"#,
            "c.json",
        )
        .unwrap();
        assert_eq!(kind, Kind::Capacity);
        for want in [
            "What SGLang would log at start-up",
            "does NOT start",
            "largest max_model_len that would: none (no KV cache fits beside the weights)",
            "no single change tried",
            "(mem_fraction_static 0.6)",
            "<td>weights</td><td title=\"26,843,545,600 bytes\">25.0 GiB</td>",
            "<td>KV cache</td>",
            "0 tokens, 0 pages",
        ] {
            assert!(html.contains(want), "{want}");
        }
        assert!(!html.contains("<script"));
        let (_, html) = render(r#"{"starts":true,"kv_cache_tokens":16}"#, "c.json").unwrap();
        assert!(html.contains("starts: 0.00 requests of 0 tokens at once"));
    }

    #[test]
    fn sizes_read_like_the_text_output() {
        assert_eq!(bytes3(0.0), "0 B");
        assert_eq!(bytes3(438.0 * 1048576.0), "438 MiB");
        assert_eq!(bytes3(65.71 * 1073741824.0), "65.7 GiB");
        assert_eq!(bytes3(1073741824.0), "1.00 GiB");
        assert_eq!(bytes3(131.4 * 1073741824.0), "131 GiB");
    }
}
