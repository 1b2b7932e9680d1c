//! The rotary tables the engines' `get_rope` builds for a config ([`RopeTables`]): which class
//! the config's own rope parameters build ([`RopeClass`], which sizes its rows), and whether
//! sliding layers make a table of their own.

use serde_json::{Map, Value};

use super::{kind_of, Cfg};
use crate::describe::{RopeClass, RopeTables};
use crate::error::{Error, Result};

/// Reads the rope parameters of a decoder's config (the text config of a wrapper), whose
/// `max_position_embeddings` is `max_positions`.
///
/// The class is `get_rope`'s by `rope_type` ([`class_for`]).
///
/// Sliding layers: Gemma 3 passes its sliding layers `rope_type: default` and
/// `rope_local_base_freq` (`Gemma3Config`'s default 10,000; `rope_theta` 1,000,000) and its
/// full layers the config's own (`gemma3.py`); Gemma 4 takes each layer type's entry of
/// `rope_parameters` (`gemma4.py`, v0.19.0). Different parameters are a different key.
pub(super) fn rope_tables(c: &Cfg, max_positions: u64) -> Result<RopeTables> {
    let (global, per_type) = global_parameters(c);
    let class = match global {
        Some((key, r)) => class_for(c, key, r, max_positions)?,
        None => RopeClass::Positions,
    };
    let local = match c.model_type {
        "gemma3" | "gemma3_text" => match per_type {
            Some(p) => p.get("sliding_attention") != p.get("full_attention"),
            None => {
                let scaled = global
                    .map(|(_, r)| {
                        !matches!(
                            r.get("rope_type").or_else(|| r.get("type")),
                            Some(Value::String(t)) if t == "default"
                        )
                    })
                    .unwrap_or(false);
                scaled || base(c, "rope_local_base_freq", 10_000.0) != base(c, "rope_theta", 1e6)
            }
        },
        // Gemma 4's two layer types differ in head size as well (`global_head_dim`): two keys
        // whatever the parameters, counted by width where the parameters agree.
        "gemma4" | "gemma4_text" => match per_type {
            Some(p) => p.get("sliding_attention") != p.get("full_attention"),
            None => true,
        },
        _ => false,
    };
    let sglang_per_base_tables = match c.model_type {
        "gemma3" | "gemma3_text" => {
            let theta = |p: Option<&Value>, default: f64| {
                p.and_then(|p| p.get("rope_theta"))
                    .and_then(Value::as_f64)
                    .unwrap_or(default)
            };
            let differ = match per_type {
                // transformers 5's per-type parameters: SGLang reads each type's `rope_theta`
                // (10,000 and 1,000,000 where missing, `gemma3_causal.py` at 0.5.10).
                Some(p) => {
                    theta(p.get("sliding_attention"), 10_000.0)
                        != theta(p.get("full_attention"), 1_000_000.0)
                }
                None => base(c, "rope_local_base_freq", 10_000.0) != base(c, "rope_theta", 1e6),
            };
            1 + u8::from(differ)
        }
        _ => 0,
    };
    Ok(RopeTables {
        class,
        local,
        sglang_per_base_tables,
    })
}

/// A top-level base frequency of the config, `default` where it is missing.
fn base(c: &Cfg, name: &str, default: f64) -> f64 {
    match c.map.get(name) {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(default),
        _ => default,
    }
}

/// The config's own rope parameters (the full layers' for a per-layer-type
/// `rope_parameters`), with the key they were found under, and the per-type map if any.
#[allow(clippy::type_complexity)]
fn global_parameters<'a>(
    c: &'a Cfg,
) -> (
    Option<(&'static str, &'a Map<String, Value>)>,
    Option<&'a Map<String, Value>>,
) {
    for key in ["rope_scaling", "rope_parameters"] {
        if let Some(Value::Object(r)) = c.map.get(key) {
            if let Some(Value::Object(full)) = r.get("full_attention") {
                return (Some((key, full)), Some(r));
            }
            return (Some((key, r)), None);
        }
    }
    (None, None)
}

/// The class `get_rope` builds for rope parameters `r` (found under `key`), by its
/// `rope_type` (or the older `type`), as vLLM's `get_rope` dispatches (read at v0.10.2 and
/// v0.19.0; SGLang's at 0.4.2 and 0.5.3 the same way for these types):
/// - `linear`: `max_position × factor` rows (`linear_scaling_rope.py`: `torch.arange` of the
///   float product);
/// - `dynamic`: with `alpha`, `max_position` rows (`dynamic_ntk_alpha_rope.py`, vLLM from
///   0.9.2 checks `alpha` first; [`RopeClass::DynamicAlpha`] keeps the `factor` that earlier
///   releases read); with `factor`, `max_position × factor` (`dynamic_ntk_scaling_rope.py`);
///   neither is vLLM's `ValueError`;
/// - `ntk`: `max_position` rows ([`RopeClass::Ntk`], which releases before vLLM 0.9 refuse);
/// - `yarn` and `deepseek_yarn`: the class is built with `original_max_position_embeddings` as
///   its length and keeps `original × factor` rows (`yarn_scaling_rope.py`,
///   `deepseek_scaling_rope.py`). Where the dict lacks the original length, the top-level
///   `original_max_position_embeddings`, else `max_position_embeddings`, which is what
///   transformers 5's `standardize_rope_params` fills in (read at 5.24);
/// - `longrope`: vLLM's `llama.py` (Phi-3's layers) copies a top-level
///   `original_max_position_embeddings` into the scaling dict (Phi-3.5/4-mini keep it there);
/// - every other type (`default`, `llama3`, M-RoPE's `default`, Gemma 4's `proportional`)
///   keeps `max_position` rows.
fn class_for(c: &Cfg, key: &str, r: &Map<String, Value>, max_positions: u64) -> Result<RopeClass> {
    let kind = match r.get("rope_type").or_else(|| r.get("type")) {
        Some(Value::String(t)) => t.as_str(),
        _ => return Ok(RopeClass::Positions),
    };
    let number = |name: &str| -> Result<f64> {
        match r.get(name) {
            Some(Value::Number(n)) => match n.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => Ok(f),
                _ => Err(Error::OutOfRange {
                    field: format!("{key}.{name}"),
                    value: n.to_string(),
                    why: "must be a positive number".into(),
                }),
            },
            Some(other) => Err(Error::WrongType {
                field: format!("{key}.{name}"),
                expected: "a number",
                found: kind_of(other).into(),
            }),
            None => Err(Error::MissingField {
                field: format!("{key}.{name}"),
                model_type: c.model_type.into(),
            }),
        }
    };
    // A table of more than 2^32 rows (16 GiB a lane) is no config's: a length or factor that
    // large is a typo, and its rows overflowed the table's bytes.
    let bounded = |n: f64, what: &dyn Fn() -> String| -> Result<u64> {
        if n > crate::setup::MAX_TOKENS as f64 {
            return Err(Error::OutOfRange {
                field: key.to_string(),
                value: what(),
                why: format!(
                    "gives a rotary table of more than {} positions",
                    crate::setup::MAX_TOKENS
                ),
            });
        }
        Ok(n as u64)
    };
    // As written where short (40, 4096), else in exponent form (not 300 digits).
    let num = |x: f64| {
        if x < 1e12 {
            format!("{x}")
        } else {
            format!("{x:e}")
        }
    };
    let times = |length: f64, factor: f64| -> Result<u64> {
        bounded((length * factor).ceil(), &|| {
            format!("{} positions x factor {}", num(length), num(factor))
        })
    };
    let original = || -> Result<f64> {
        if r.contains_key("original_max_position_embeddings") {
            return number("original_max_position_embeddings");
        }
        Ok(c.opt_u64(&["original_max_position_embeddings"])?
            .unwrap_or(max_positions) as f64)
    };
    Ok(match kind {
        "linear" => RopeClass::Linear {
            rows: times(max_positions as f64, number("factor")?)?,
        },
        "dynamic" if r.contains_key("alpha") => {
            number("alpha")?;
            RopeClass::DynamicAlpha {
                factor_rows: match r.contains_key("factor") {
                    true => Some(times(max_positions as f64, number("factor")?)?),
                    false => None,
                },
            }
        }
        "dynamic" => RopeClass::DynamicNtk {
            rows: times(max_positions as f64, number("factor")?)?,
        },
        "yarn" | "deepseek_yarn" => RopeClass::Yarn {
            rows: times(original()?, number("factor")?)?,
            deepseek: kind == "deepseek_yarn",
        },
        "ntk" => RopeClass::Ntk,
        "longrope" => {
            let original = match c.opt_u64(&["original_max_position_embeddings"])? {
                Some(o) if !r.contains_key("original_max_position_embeddings") => o as f64,
                _ => number("original_max_position_embeddings")?,
            };
            RopeClass::LongRope {
                original: bounded(original, &|| {
                    format!("original_max_position_embeddings {}", num(original))
                })?,
            }
        }
        _ => RopeClass::Positions,
    })
}
