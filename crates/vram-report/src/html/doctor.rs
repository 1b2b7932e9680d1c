//! The page of a `vram doctor` answer: the sentences of its text ([`crate::doctor::Sections`]),
//! in the same order, the remedies and the breakdowns as tables.

use super::{esc, notes, p, text_table};
use crate::doctor::Answer;

pub(super) fn doctor(a: &Answer) -> String {
    let s = a.sections();
    let mut o = String::from("<h2>What happened</h2>");
    for (i, l) in s.head.iter().enumerate() {
        o.push_str(&p(&format!("head-{i}"), "", l));
    }
    if let Some(causes) = &s.causes {
        o.push_str("<h2>Causes (most important first)</h2>");
        if causes.is_empty() {
            o.push_str(&p("causes", "", "none found in the figures given"));
        } else {
            let rows: Vec<Vec<String>> = causes
                .iter()
                .enumerate()
                .map(|(i, c)| vec![format!("{}", i + 1), c.clone()])
                .collect();
            o.push_str(&text_table("causes", &["#", "cause"], &rows));
        }
    }
    if !s.undecided.is_empty() {
        o.push_str(
            "<h2>What this message cannot tell apart, and what would</h2><ul id=\"undecided\">",
        );
        for (what, check) in &s.undecided {
            o.push_str(&format!("<li>{}<br>check: {}</li>", esc(what), esc(check)));
        }
        o.push_str("</ul>");
    }
    if let Some((line, rows)) = &s.estimate {
        o.push_str("<h2>Estimate of the step</h2>");
        o.push_str(&p("estimate", "", line));
        let rows: Vec<Vec<String>> = rows
            .iter()
            .map(|(c, b)| vec![c.clone(), b.clone()])
            .collect();
        o.push_str(&text_table("breakdown", &["category", "bytes"], &rows));
    }
    if let Some((line, rows)) = &s.replay {
        o.push_str("<h2>Snapshot replay</h2>");
        o.push_str(&p("replay-line", "", line));
        let rows: Vec<Vec<String>> = rows.iter().map(|r| r.to_vec()).collect();
        o.push_str(&text_table(
            "replay",
            &["policy", "high point", "against PyTorch's", "outcome"],
            &rows,
        ));
    }
    o.push_str("<h2>Remedies (best first)</h2>");
    let rows: Vec<Vec<String>> = s
        .remedies
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                format!("{}", i + 1),
                r.action.clone(),
                r.tag.clone(),
                r.detail.clone(),
            ]
        })
        .collect();
    o.push_str(&text_table("remedies", &["#", "change", "", "why"], &rows));
    o.push_str(&notes(&s.notes));
    o
}
