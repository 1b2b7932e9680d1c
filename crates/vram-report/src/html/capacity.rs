//! The `vram capacity` page: what vLLM or SGLang would log at start-up, the per-GPU figures,
//! whether it starts and what to change when it does not, in the sentences and sizes of the
//! text output (the same functions).

use vram_model::fmt::{bytes, thousands};

use super::svg::{bar_chart, esc};
use super::{bytes3, p, ul};
use crate::capacity::CapacityReport;

/// The page body.
pub(super) fn capacity(r: &CapacityReport) -> String {
    let engine = r.engine_name();
    let c = &r.capacity;
    let mut o = format!("<h2>Serving capacity: {} with {engine}</h2>", esc(&r.model));
    o.push_str(&p("setup", "", &r.description));
    // The verdict lines of the text output.
    let v = r.verdict_lines();
    if c.starts {
        o.push_str(&p("verdict", "good", &v[0]));
    } else {
        o.push_str(&p("verdict", "bad", &v[0]));
        o.push_str(&p("fits", "", &v[1]));
        match &r.cheapest_change {
            Some(f) => o.push_str(&format!(
                "<p id=\"change\">{}</p>",
                esc(&v[2]).replacen(
                    &esc(&f.flags),
                    &format!("<code>{}</code>", esc(&f.flags)),
                    1
                )
            )),
            None => o.push_str(&p("change", "", &v[2])),
        }
    }
    o.push_str(&format!("<h2>What {engine} would log at start-up</h2>"));
    o.push_str("<pre id=\"log\" style=\"white-space:pre-wrap;overflow-wrap:anywhere\">");
    for l in &c.log {
        o.push_str(&esc(l));
        o.push('\n');
    }
    o.push_str("</pre>");
    // The text's per-GPU table, row for row.
    o.push_str("<h2>Per GPU</h2><table class=\"kv\" id=\"per-gpu\">");
    for row in r.rows() {
        o.push_str(&format!(
            "<tr><td>{}</td><td title=\"{} bytes\">{}</td><td class=\"muted\">{}</td></tr>",
            row.label,
            thousands(row.bytes),
            bytes(row.bytes),
            esc(&row.note)
        ));
    }
    o.push_str("</table>");
    let groups = r.kv_group_rows();
    if !groups.is_empty() {
        o.push_str("<h2>KV cache per layer kind</h2><table class=\"kv\" id=\"kv-groups\">");
        for (kind, page, detail) in groups {
            o.push_str(&format!(
                "<tr><td>{}</td><td title=\"{} bytes\">{}</td><td class=\"muted\">{}</td></tr>",
                esc(&kind),
                thousands(page),
                bytes(page),
                esc(&detail)
            ));
        }
        o.push_str("</table>");
    }
    // Where the device goes, against its total.
    let mut items: Vec<(String, f64)> = r
        .rows()
        .into_iter()
        .filter(|row| row.label != "budget")
        .map(|row| (row.label.to_string(), row.bytes as f64))
        .collect();
    items.push(("budget".into(), c.budget_bytes as f64));
    items.push(("device total".into(), c.total_bytes as f64));
    o.push_str("<h2>Per GPU, against the device</h2>");
    let total = c.total_bytes as f64;
    o.push_str(&bar_chart(&items, &bytes3, (total > 0.0).then_some(total)));
    o.push_str("<h2>Assumed</h2>");
    o.push_str(&ul("assumes", &c.assumes));
    o.push_str(&super::notes(&r.notes));
    o
}
