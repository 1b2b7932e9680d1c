//! `vram doctor`'s answer read back from its `--json`: the text the CLI prints and the page
//! `vram report` renders are both made here, from the same fields of that JSON, so the two say
//! the same sentences in the same order (the CLI serialises its diagnosis and prints
//! [`Answer::text`]; `vram report` reads the file and renders [`Answer::sections`]).
//!
//! Two shapes: a PyTorch out-of-memory message's diagnosis (`causes`, `figures`, `remedies`:
//! `vram_doctor::Diagnosis`) and a serving engine's start-up error (`knob`, `headline`,
//! `remedies`: `vram_doctor::serving::ServingDiagnosis`). Fields this module does not print are
//! ignored; a field it prints that is missing or of the wrong type is refused in one line.

use serde::Deserialize;
use serde_json::Value;
use vram_doctor::message::Backend;
use vram_doctor::{human_bytes as hb, CauseKind};

use crate::error::{Error, Result};

/// A doctor's answer, as its JSON holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A PyTorch out-of-memory message's diagnosis.
    Pytorch(Box<Pytorch>),
    /// A serving engine's start-up error.
    Serving(Box<Serving>),
}

/// The fields of a PyTorch diagnosis that the text and the page print.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Pytorch {
    message: Message,
    figures: Figures,
    usable_bytes: u64,
    non_pytorch_bytes: Option<u64>,
    shortfall_bytes: u64,
    left_bytes: Option<u64>,
    causes: Vec<Cause>,
    undecided: Vec<Undecided>,
    estimate: Option<Estimate>,
    replay: Vec<Policy>,
    remedies: Vec<Remedy>,
    notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Message {
    backend: Backend,
    device: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Figures {
    requested_bytes: u64,
    total_bytes: u64,
    free_bytes: u64,
    allocated_bytes: u64,
    reserved_bytes: u64,
    unallocated_bytes: u64,
    allowed_bytes: Option<u64>,
    non_pytorch_bytes: Option<u64>,
    unaccounted_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Cause {
    kind: CauseKind,
    sufficient: bool,
    detail: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Undecided {
    causes: Vec<CauseKind>,
    why: String,
    check: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Estimate {
    peak_allocated_bytes: u64,
    total_bytes: u64,
    peak_phase: String,
    breakdown: Vec<(String, u64)>,
    fits: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Policy {
    policy: String,
    peak_reserved_bytes: u64,
    saves_bytes: u64,
    reserves_more_bytes: u64,
    would_oom: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Remedy {
    action: String,
    saves_bytes: Option<u64>,
    enough: bool,
    detail: String,
}

/// The fields of a serving start-up diagnosis that the text and the page print.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Serving {
    engine: String,
    headline: String,
    knob: String,
    explanation: String,
    remedies: Vec<ServingRemedy>,
    notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct ServingRemedy {
    action: String,
    enough: bool,
    detail: String,
}

/// One remedy as printed: `N. action  [tag]` and its detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Printed {
    /// What to change.
    pub action: String,
    /// `enough; saves 1.00 GiB`, `not enough alone`, ...
    pub tag: String,
    /// Why, with the figures.
    pub detail: String,
}

/// The answer's parts in the order both outputs print them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sections {
    /// The first lines: what happened, with the message's figures.
    pub head: Vec<String>,
    /// `causes (most important first):` and one line per cause (PyTorch only).
    pub causes: Option<Vec<String>>,
    /// What the message cannot tell apart: (the causes and why, what would check it).
    pub undecided: Vec<(String, String)>,
    /// The estimate's line and its breakdown (category, size).
    pub estimate: Option<(String, Vec<(String, String)>)>,
    /// The snapshot replay's line and its rows (policy, `peak reserved` and its size, against the
    /// default, outcome).
    pub replay: Option<(String, Vec<[String; 4]>)>,
    /// The remedies, best first.
    pub remedies: Vec<Printed>,
    /// The notes.
    pub notes: Vec<String>,
}

fn bad(reason: String) -> Error {
    Error::Unrecognised { reason }
}

/// Whether a JSON object is a doctor's answer (it may still be refused by [`Answer::from_value`]).
pub fn looks_like(m: &serde_json::Map<String, Value>) -> bool {
    m.contains_key("remedies") && (m.contains_key("causes") || m.contains_key("knob"))
}

impl Answer {
    /// Reads a doctor's `--json`.
    ///
    /// # Errors
    /// [`Error::Unrecognised`], in one line, when a field the outputs print is missing or of the
    /// wrong type, or the figures contradict each other.
    pub fn from_value(v: Value) -> Result<Answer> {
        let serving = v.get("knob").is_some();
        let what = if serving {
            "a vram doctor answer (serving start-up error)"
        } else {
            "a vram doctor answer (PyTorch message)"
        };
        let refuse = |e: serde_json::Error| bad(format!("{what} with a bad field: {e}"));
        let a = if serving {
            Answer::Serving(Box::new(serde_json::from_value(v).map_err(refuse)?))
        } else {
            Answer::Pytorch(Box::new(serde_json::from_value(v).map_err(refuse)?))
        };
        a.check()
            .map_err(|e| bad(format!("{what} whose figures disagree: {e}")))?;
        Ok(a)
    }

    /// What a hand-edited answer could get wrong that its types do not catch.
    fn check(&self) -> std::result::Result<(), String> {
        let (actions, notes): (Vec<&str>, &[String]) = match self {
            Answer::Pytorch(d) => {
                // (A real message can print more allocated than reserved: AUTOMATIC1111's
                // stable-diffusion-webui#10619 does; that is not checked.)
                let f = &d.figures;
                if f.requested_bytes == 0 && f.total_bytes == 0 && d.message.backend != Backend::Mps
                {
                    return Err("figures.requested_bytes and figures.total_bytes are both 0".into());
                }
                // One is what the request lacks, the other what it would leave: at most one is
                // above 0.
                if d.shortfall_bytes > 0 && d.left_bytes.is_some_and(|l| l > 0) {
                    return Err(format!(
                        "shortfall_bytes {} and left_bytes {} are both above 0",
                        d.shortfall_bytes,
                        d.left_bytes.unwrap_or(0)
                    ));
                }
                (
                    d.remedies.iter().map(|r| r.action.as_str()).collect(),
                    &d.notes,
                )
            }
            Answer::Serving(s) => {
                if s.engine.trim().is_empty() || s.headline.trim().is_empty() {
                    return Err("engine or headline is empty".into());
                }
                (
                    s.remedies.iter().map(|r| r.action.as_str()).collect(),
                    &s.notes,
                )
            }
        };
        if let Some(i) = actions.iter().position(|a| a.trim().is_empty()) {
            return Err(format!("remedies[{i}].action is empty"));
        }
        if let Some(i) = notes.iter().position(|n| n.contains('\n')) {
            return Err(format!("notes[{i}] holds a line break"));
        }
        Ok(())
    }

    /// The answer's parts, in order, as both outputs print them.
    pub fn sections(&self) -> Sections {
        match self {
            Answer::Pytorch(d) => d.sections(),
            Answer::Serving(s) => Sections {
                head: vec![
                    format!("{} start-up error: {} ({})", s.engine, s.headline, s.knob),
                    s.explanation.clone(),
                ],
                remedies: s
                    .remedies
                    .iter()
                    .map(|r| Printed {
                        action: r.action.clone(),
                        tag: if r.enough {
                            "enough"
                        } else {
                            "not enough alone"
                        }
                        .into(),
                        detail: r.detail.clone(),
                    })
                    .collect(),
                notes: s.notes.clone(),
                ..Sections::default()
            },
        }
    }

    /// The text `vram doctor` prints.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let s = self.sections();
        let mut o = String::new();
        // A serving answer's explanation follows its headline; a PyTorch answer's figure lines
        // run on.
        for l in &s.head {
            let _ = writeln!(o, "{l}");
        }
        if let Some(causes) = &s.causes {
            let _ = writeln!(o);
            let _ = writeln!(o, "causes (most important first):");
            for (i, c) in causes.iter().enumerate() {
                let _ = writeln!(o, "{}. {c}", i + 1);
            }
            if causes.is_empty() {
                let _ = writeln!(o, "none found in the figures given");
            }
        }
        if !s.undecided.is_empty() {
            let _ = writeln!(o);
            let _ = writeln!(o, "what this message cannot tell apart, and what would:");
            for (what, check) in &s.undecided {
                let _ = writeln!(o, "- {what}");
                let _ = writeln!(o, "  check: {check}");
            }
        }
        if let Some((line, rows)) = &s.estimate {
            let _ = writeln!(o);
            let _ = writeln!(o, "{line}");
            for (cat, b) in rows {
                let _ = writeln!(o, "  {cat:<22} {b:>12}");
            }
        }
        if let Some((line, rows)) = &s.replay {
            let _ = writeln!(o);
            let _ = writeln!(o, "{line}");
            for [p, r, a, w] in rows {
                let r = r.strip_prefix("peak reserved ").unwrap_or(r);
                let _ = writeln!(o, "  {p:<20} peak reserved {r:>12}  {a:<24}  {w}");
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "remedies (best first):");
        for (i, r) in s.remedies.iter().enumerate() {
            let _ = writeln!(o, "{}. {}  [{}]", i + 1, r.action, r.tag);
            let _ = writeln!(o, "   {}", r.detail);
        }
        for l in crate::notes::lines(&s.notes) {
            let _ = writeln!(o, "{l}");
        }
        o
    }
}

impl Pytorch {
    fn sections(&self) -> Sections {
        let m = &self.message;
        let f = &self.figures;
        let mut head = Vec::new();
        if m.backend == Backend::Mps {
            // No device size nor free memory: the message's own three figures and the watermark.
            head.push(format!(
                "MPS (Apple GPU): {} requested; PyTorch's Metal heaps {}, other Metal allocations {}; high watermark {}",
                hb(f.requested_bytes),
                hb(f.reserved_bytes),
                hb(f.non_pytorch_bytes.unwrap_or(0)),
                f.allowed_bytes.map_or("disabled".to_string(), hb),
            ));
            if f.allowed_bytes.is_some() {
                head.push(format!(
                    "PyTorch's heaps could reach at most {} under the watermark; over it by {}",
                    hb(self.usable_bytes),
                    hb(self.shortfall_bytes)
                ));
            }
        } else {
            head.push(format!(
                "{} {}: {} requested, {} free of {}; PyTorch: {} allocated, {} reserved ({} of it unallocated); {}",
                m.backend.device_word(),
                m.device,
                hb(f.requested_bytes),
                hb(f.free_bytes),
                hb(f.total_bytes),
                hb(f.allocated_bytes),
                hb(f.reserved_bytes),
                hb(f.unallocated_bytes),
                match self.non_pytorch_bytes {
                    Some(n) => format!("outside PyTorch in this process: {}", hb(n)),
                    None => format!("neither free nor PyTorch's: {}", hb(f.unaccounted_bytes)),
                }
            ));
            head.push(format!(
                "this process could hold at most {} (reserved + free{}); missing even with every cached byte usable: {}{}",
                hb(self.usable_bytes),
                if f.allowed_bytes.is_some() { ", capped by allowed" } else { "" },
                hb(self.shortfall_bytes),
                match self.left_bytes {
                    Some(left) if self.shortfall_bytes == 0 => format!(" ({} would be left)", hb(left)),
                    _ => String::new(),
                }
            ));
        }
        let causes = self
            .causes
            .iter()
            .map(|c| {
                format!(
                    "{}{}: {}",
                    c.kind.label(m.backend),
                    if c.sufficient {
                        " (explains it alone)"
                    } else {
                        ""
                    },
                    c.detail
                )
            })
            .collect();
        let undecided = self
            .undecided
            .iter()
            .map(|u| {
                let names: Vec<&str> = u.causes.iter().map(|&k| k.label(m.backend)).collect();
                (
                    format!("{}: {}", names.join(" or "), u.why),
                    u.check.clone(),
                )
            })
            .collect();
        let estimate = self.estimate.as_ref().map(|e| {
            (
                format!(
                    "estimate of the step: {} at the peak ({}), {} allocated; {}",
                    hb(e.total_bytes),
                    e.peak_phase,
                    hb(e.peak_allocated_bytes),
                    if e.fits { "fits" } else { "does not fit" }
                ),
                e.breakdown
                    .iter()
                    .take(8)
                    .map(|(c, b)| (c.clone(), hb(*b)))
                    .collect(),
            )
        });
        let replay = (!self.replay.is_empty()).then(|| {
            (
                format!("snapshot replayed in the {} usable:", hb(self.usable_bytes)),
                self.replay
                    .iter()
                    .map(|r| {
                        [
                            r.policy.clone(),
                            format!("peak reserved {}", hb(r.peak_reserved_bytes)),
                            vram_doctor::against_default(
                                &r.policy,
                                r.reserves_more_bytes,
                                r.saves_bytes,
                            ),
                            if r.would_oom { "out of memory" } else { "fits" }.into(),
                        ]
                    })
                    .collect(),
            )
        });
        let remedies = self
            .remedies
            .iter()
            .map(|r| Printed {
                action: r.action.clone(),
                tag: match (r.enough, r.saves_bytes) {
                    (true, Some(s)) => format!("enough; saves {}", hb(s)),
                    (true, None) => "enough".to_string(),
                    (false, Some(s)) => format!("saves {}; not enough alone", hb(s)),
                    (false, None) => "not enough alone".to_string(),
                },
                detail: r.detail.clone(),
            })
            .collect();
        Sections {
            head,
            causes: Some(causes),
            undecided,
            estimate,
            replay,
            remedies,
            notes: self.notes.clone(),
        }
    }
}
