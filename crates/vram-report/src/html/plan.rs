//! The `vram plan` pages: the plans' table and charts, or the closest configuration and what
//! would make it fit.

use vram_model::fmt::bytes;

use super::svg::{bar_chart, esc};
use super::{bytes3, group, p, text_table, unique};
use crate::plan::{FinetunePlanReport, PlanReport, FT_RANKING};

pub(super) use crate::parts::name_of;

/// The page of a parallel plan search.
pub(super) fn plan(r: &PlanReport) -> String {
    let mut o = format!("<h2>Parallelism plans for {}</h2>", esc(&r.model));
    o.push_str(&p(
        "setup",
        "",
        &format!("{}; {}", r.description, r.priced_line()),
    ));
    if let Some(l) = r.nothing_fits() {
        o.push_str(&p("verdict", "bad", &l));
    }
    if !r.suggestions.is_empty() {
        o.push_str(&super::ul("suggestions", &r.suggestions));
    }
    let (head, rows) = r.table();
    if rows.is_empty() {
        o.push_str("<p class=\"muted\">The plan lists no configurations.</p>");
        return o;
    }
    // Bars of different rows carry different labels.
    let labels = unique(rows.iter().map(|r| r[0].clone()).collect());
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .zip(&labels)
        .map(|(mut r, l)| {
            r[0] = l.clone();
            r
        })
        .collect();
    if r.plans.is_empty() {
        o.push_str("<h2>Closest configuration</h2>");
    }
    o.push_str(&text_table("plans", &head, &rows));
    let shown: Vec<&crate::plan::PlanRow> = if r.plans.is_empty() {
        r.closest.iter().collect()
    } else {
        r.plans.iter().collect()
    };
    let series = |f: &dyn Fn(&crate::plan::PlanRow) -> f64| -> Vec<(String, f64)> {
        shown
            .iter()
            .zip(&labels)
            .map(|(p, l)| (l.clone(), f(p)))
            .collect()
    };
    o.push_str("<h2>Throughput (tokens/s)</h2>");
    o.push_str(&bar_chart(
        &series(&|p| p.tokens_per_s),
        &|v| group(&format!("{v:.0}")),
        None,
    ));
    o.push_str("<h2>Peak memory per GPU</h2>");
    o.push_str(&bar_chart(
        &series(&|p| p.peak_bytes_per_gpu as f64),
        &bytes3,
        Some(r.gpu_memory_bytes as f64),
    ));
    o.push_str("<h2>Model FLOPs utilisation</h2>");
    o.push_str(&bar_chart(
        &series(&|p| p.mfu),
        &|v| format!("{:.1}%", v * 100.0),
        None,
    ));
    o.push_str(&super::notes(&r.notes));
    o
}

/// The page of a LoRA/QLoRA plan search.
pub(super) fn finetune_plan(r: &FinetunePlanReport) -> String {
    let mut o = format!(
        "<h2>{} plans for {}</h2>",
        esc(&r.finetune.to_uppercase()),
        esc(&r.model)
    );
    o.push_str(&p("setup", "", &r.description));
    o.push_str(&p("ranking", "muted", FT_RANKING));
    if let Some(l) = r.nothing_fits() {
        o.push_str(&p("verdict", "bad", &l));
        o.push_str(&super::notes(&r.notes));
        return o;
    }
    let rows: Vec<Vec<String>> = r.rows().into_iter().map(|r| r.to_vec()).collect();
    o.push_str(&text_table(
        "plans",
        &["configuration", "TFLOP/step", "mem/GPU"],
        &rows,
    ));
    let labels = unique(r.plans.iter().map(|p| p.label.clone()).collect());
    let items: Vec<(String, f64)> = r
        .plans
        .iter()
        .zip(labels)
        .map(|(p, l)| (l, p.plan.bytes_per_gpu as f64))
        .collect();
    o.push_str("<h2>Memory per GPU</h2>");
    o.push_str(&bar_chart(&items, &bytes3, Some(r.gpu_memory_bytes as f64)));
    let _ = bytes;
    o.push_str(&super::notes(&r.notes));
    o
}
