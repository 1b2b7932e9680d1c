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
//! The description has no module names, so each role is tested by the name its linear has in
//! the Hugging Face layout of every layer that holds the role (`model.layers.{i}.` or a
//! multimodal wrapper's `language_model.model.layers.{i}.` / `model.language_model.layers.{i}.`):
//! the attention by `self_attn.o_proj`, a dense MLP by `mlp.down_proj`, shared experts by
//! `mlp.shared_experts.down_proj` (DeepSeek) or `mlp.shared_expert.down_proj` (Qwen-MoE),
//! routed experts by `mlp.experts.0.down_proj`. A role is left unquantized where every layer
//! that holds it matches; where only some do, it is counted quantized and a note says so. The
//! head, routers, towers and MTP layers are unquantized for W4A16 already.

use regex::Regex;
use serde_json::Value;

use crate::describe::{Blocks, Ignored};
use crate::error::{Error, Result};
use crate::mech::{Component, TensorKind};

/// The roles the ignore list is read for, each with the module-name suffixes that stand for it.
const ROLES: [(Component, &[&str]); 4] = [
    (Component::Mixer, &["self_attn.o_proj"]),
    (Component::DenseMlp, &["mlp.down_proj"]),
    (
        Component::SharedExperts,
        &[
            "mlp.shared_experts.down_proj",
            "mlp.shared_expert.down_proj",
        ],
    ),
    (Component::RoutedExperts, &["mlp.experts.0.down_proj"]),
];

/// The layer prefixes a checkpoint's names take.
const PREFIXES: [&str; 3] = [
    "model.layers.",
    "language_model.model.layers.",
    "model.language_model.layers.",
];

/// One `ignore` entry.
enum Entry {
    /// `re:PATTERN`, anchored at the start as `re.match` is.
    Pattern(Regex),
    /// A whole module (or class) name.
    Name(String),
}

impl Entry {
    fn matches(&self, name: &str) -> bool {
        match self {
            Entry::Pattern(r) => r.is_match(name),
            Entry::Name(n) => n == name,
        }
    }
}

/// Reads `quantization_config.ignore` (a list of strings) into the components it leaves
/// unquantized in `blocks`, with a note for each role it names in some layers only.
pub(super) fn read(
    qc: &serde_json::Map<String, Value>,
    blocks: &Blocks,
) -> Result<(Ignored, Vec<String>)> {
    let bad = |value: String, why: &str| Error::OutOfRange {
        field: "quantization_config.ignore".into(),
        value,
        why: why.into(),
    };
    let entries: Vec<Entry> = match qc.get("ignore") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v.as_str() {
                Some(s) => match s.strip_prefix("re:") {
                    Some(p) => Regex::new(&format!("^(?:{p})"))
                        .map(Entry::Pattern)
                        .map_err(|_| bad(s.into(), "a `re:` entry must be a regular expression")),
                    None => Ok(Entry::Name(s.into())),
                },
                None => Err(bad(
                    v.to_string(),
                    "expected a list of module names or `re:` patterns",
                )),
            })
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(bad(
                other.to_string(),
                "expected a list of module names or `re:` patterns",
            ))
        }
    };
    let mut ignored = Ignored::default();
    let mut notes = Vec::new();
    if entries.is_empty() {
        return Ok((ignored, notes));
    }
    // Which layers hold each role's linears.
    let mut holds = vec![[false; Component::COUNT]; blocks.pattern.len()];
    for (i, &k) in blocks.pattern.iter().enumerate() {
        blocks.kinds[k as usize].tensors(blocks.hidden, &mut |t| {
            if matches!(t.kind, TensorKind::Linear | TensorKind::Experts(_)) {
                holds[i][t.component as usize] = true;
            }
        });
    }
    for (role, suffixes) in ROLES {
        let layers: Vec<usize> = (0..holds.len())
            .filter(|&i| holds[i][role as usize])
            .collect();
        let matched = layers
            .iter()
            .filter(|&&i| {
                PREFIXES.iter().any(|p| {
                    suffixes.iter().any(|s| {
                        let name = format!("{p}{i}.{s}");
                        entries.iter().any(|e| e.matches(&name))
                    })
                })
            })
            .count();
        if matched == 0 {
            continue;
        }
        if matched == layers.len() {
            ignored.insert(role);
        } else {
            notes.push(format!(
                "quantization_config's ignore list names the {} of {matched} of {} layers: they are counted quantized",
                role.key(),
                layers.len()
            ));
        }
    }
    Ok((ignored, notes))
}
