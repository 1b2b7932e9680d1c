//! compressed-tensors' `ignore` list: which of the layers' linears a `compressed-tensors`
//! checkpoint leaves in the dtype, as one role→quantized predicate
//! ([`crate::describe::Ignored`], read by [`crate::describe::Storage::ignores`]).
//!
//! Both readers match a module's name the same way: an entry `re:PATTERN` matches where Python's
//! `re.match(PATTERN, name)` does (anchored at the start only), any other entry where it equals
//! the whole name (compressed-tensors 0.10.2 `quantization/lifecycle/apply.py`
//! `find_name_or_class_matches`/`_find_matches`, which also tries the module's class name; vLLM
//! 0.10.0 `compressed_tensors/utils.py` `should_ignore_layer`/`_is_equal_or_regex_match`, called
//! from `CompressedTensorsConfig.get_quant_method` before any scheme is chosen).
//!
//! Each role is tested by every name its linears have in the checkpoint's layout, in every layer
//! that holds it: the layer's sites as transformers names them ([`crate::finetune::block_sites`]:
//! `self_attn.q_a_proj`, `mlp.shared_experts.down_proj`, ...), a fused expert bank as the
//! checkpoint's one linear per expert (`mlp.experts.gate_up_proj` of 384 experts as
//! `mlp.experts.{0..383}.gate_proj` and `.up_proj`), each under the layer prefixes a checkpoint
//! takes (`model.layers.{i}.`, a multimodal wrapper's `language_model.model.layers.{i}.` or
//! `model.language_model.layers.{i}.`). A role is left unquantized where every one of its names
//! in every layer that holds it matches; where only some do, it is counted quantized and a note
//! says so. The head, routers, towers and MTP layers are unquantized for W4A16 already.

use std::collections::HashSet;

use regex::Regex;
use serde_json::Value;

use crate::describe::{Blocks, Ignored, MoeConversion};
use crate::error::{Error, Result};
use crate::mech::{Component, SiteKind};

/// The layer prefixes a checkpoint's names take.
const PREFIXES: [&str; 3] = [
    "model.layers.",
    "language_model.model.layers.",
    "model.language_model.layers.",
];

/// A compressed-tensors `ignore` list, parsed.
#[derive(Debug)]
pub struct IgnoreList {
    /// The `re:` entries as one pattern, each alternative anchored at the start as `re.match`
    /// is; `None` where there are none.
    patterns: Option<Regex>,
    /// The other entries: whole module (or class) names.
    names: HashSet<String>,
}

impl IgnoreList {
    /// Parses `quantization_config.ignore` (absent or null: empty); an entry that is not a
    /// string, or a `re:` entry that is not a regular expression, is a one-line error.
    pub fn parse(qc: &serde_json::Map<String, Value>) -> Result<IgnoreList> {
        let bad = |value: String, why: &str| Error::OutOfRange {
            field: "quantization_config.ignore".into(),
            value,
            why: why.into(),
        };
        let mut patterns = Vec::new();
        let mut names = HashSet::new();
        match qc.get("ignore") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                for v in a {
                    let Some(s) = v.as_str() else {
                        return Err(bad(
                            v.to_string(),
                            "expected a list of module names or `re:` patterns",
                        ));
                    };
                    match s.strip_prefix("re:") {
                        Some(p) => {
                            // Each alone first, so the error names the entry at fault.
                            Regex::new(&format!("^(?:{p})")).map_err(|_| {
                                bad(s.into(), "a `re:` entry must be a regular expression")
                            })?;
                            patterns.push(format!("^(?:{p})"));
                        }
                        None => {
                            names.insert(s.to_string());
                        }
                    }
                }
            }
            Some(other) => {
                return Err(bad(
                    other.to_string(),
                    "expected a list of module names or `re:` patterns",
                ))
            }
        }
        let patterns = match patterns.is_empty() {
            true => None,
            false => Some(Regex::new(&patterns.join("|")).map_err(|_| {
                bad(
                    patterns.join(", "),
                    "the `re:` entries must be regular expressions",
                )
            })?),
        };
        Ok(IgnoreList { patterns, names })
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_none() && self.names.is_empty()
    }

    /// Whether the list names the module `name` (its whole name, from the checkpoint's root).
    pub fn matches(&self, name: &str) -> bool {
        self.names.contains(name) || self.patterns.as_ref().is_some_and(|r| r.is_match(name))
    }
}

/// Reads `quantization_config.ignore` (a list of strings) into the components it leaves
/// unquantized in `blocks`, with a note for each role it names in some of its layers or some
/// of its linears only.
pub(super) fn read(
    qc: &serde_json::Map<String, Value>,
    blocks: &Blocks,
) -> Result<(Ignored, Vec<String>)> {
    let list = IgnoreList::parse(qc)?;
    let mut ignored = Ignored::default();
    let mut notes = Vec::new();
    if list.is_empty() {
        return Ok((ignored, notes));
    }
    // Per component: the layers that hold it, and of them those whose every name matches and
    // those where only some do.
    let mut holds = [0usize; Component::COUNT];
    let mut whole = [0usize; Component::COUNT];
    let mut some = [0usize; Component::COUNT];
    let names: Vec<Vec<(Component, String)>> = blocks
        .kinds
        .iter()
        .map(|k| linear_names(blocks, k))
        .collect();
    for (i, &k) in blocks.pattern.iter().enumerate() {
        for c in Component::ALL {
            let mine: Vec<&str> = names[k as usize]
                .iter()
                .filter(|(x, _)| *x == c)
                .map(|(_, n)| n.as_str())
                .collect();
            if mine.is_empty() {
                continue;
            }
            holds[c as usize] += 1;
            // The best prefix: the one under which most of the layer's names match.
            let matched = PREFIXES
                .iter()
                .map(|p| {
                    mine.iter()
                        .filter(|n| {
                            let name = format!("{p}{i}.{n}");
                            list.matches(&name)
                        })
                        .count()
                })
                .max()
                .unwrap_or(0);
            if matched == mine.len() {
                whole[c as usize] += 1;
            } else if matched > 0 {
                some[c as usize] += 1;
            }
        }
    }
    for c in Component::ALL {
        let (n, w, s) = (holds[c as usize], whole[c as usize], some[c as usize]);
        if n == 0 || w + s == 0 {
            continue;
        }
        if w == n {
            ignored.insert(c);
        } else if s == 0 {
            notes.push(format!(
                "quantization_config's ignore list names the {} of {w} of {n} layers: they are counted quantized",
                c.key(),
            ));
        } else {
            notes.push(format!(
                "quantization_config's ignore list names some of the {}'s linears in {} of {n} layers: they are counted quantized",
                c.key(),
                w + s,
            ));
        }
    }
    Ok((ignored, notes))
}

/// Every linear of one layer kind by the name it has in the checkpoint, relative to the layer
/// (`self_attn.o_proj`, `mlp.experts.7.down_proj`), with its component: the kind's sites, a
/// fused expert bank split into its experts' linears as checkpoints store them (the v4 names of
/// the family's PEFT conversion pattern, [`MoeConversion::expert_names`]: the Mixtral layout's
/// `w1`/`w3`/`w2`; otherwise the family's gate/up/down names).
pub fn linear_names(blocks: &Blocks, kind: &crate::describe::Block) -> Vec<(Component, String)> {
    let n = &blocks.names;
    let [gate, up, down] = n
        .moe_conversion
        .map_or([n.gate, n.up, n.down], MoeConversion::expert_names);
    let mut out = Vec::new();
    for s in crate::finetune::block_sites(n, kind, blocks.hidden) {
        match s.kind {
            SiteKind::Param => {}
            SiteKind::Module => out.push((s.component, s.path)),
            SiteKind::Experts(e) => {
                let (bank, leaf) = s.path.rsplit_once('.').unwrap_or(("", &s.path));
                let leaves: &[&str] = if leaf == n.gate_up {
                    &[gate, up]
                } else if leaf == n.down {
                    &[down]
                } else if leaf == n.up {
                    &[up]
                } else {
                    &[leaf]
                };
                for j in 0..e {
                    for l in leaves {
                        out.push((s.component, format!("{bank}.{j}.{l}")));
                    }
                }
            }
        }
    }
    out
}
