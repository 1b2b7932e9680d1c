//! The longest context an engine derives from a model's config: `max_position_embeddings`,
//! stretched by the config's rope scaling by each engine's own rule. `vram capacity` takes it as
//! the default and the limit of `max_model_len`; `vram estimate`'s context search stops there.

use serde_json::Value;

use crate::capacity::Engine;

/// The longest `max_model_len` the engine derives from the config when its `rope_scaling` (or
/// transformers 5's `rope_parameters`) stretches `max_position_embeddings` (`positions`);
/// `None` when it does not. vLLM 0.11 `vllm/config/model.py` `_get_and_verify_max_len`: every
/// rope type but `su`, `longrope` and `llama3` (and not for Gemma 3) multiplies by `factor`,
/// `yarn` from `original_max_position_embeddings`. SGLang 0.5.3
/// `srt/utils/hf_transformers_utils.py` `get_context_length`: `factor` unless the scaling names
/// `original_max_position_embeddings` or is `llama3`.
pub fn derived_max_model_len(config: &Value, positions: u64, engine: Engine) -> Option<u64> {
    let c = if config.get("rope_scaling").is_some() || config.get("rope_parameters").is_some() {
        config
    } else {
        config.get("text_config").unwrap_or(config)
    };
    let rs = c
        .get("rope_scaling")
        .filter(|v| v.is_object())
        .or_else(|| c.get("rope_parameters").filter(|v| v.is_object()))?;
    let rope_type = rs["rope_type"]
        .as_str()
        .or_else(|| rs["type"].as_str())
        .unwrap_or("default");
    let factor = rs["factor"].as_f64().unwrap_or(1.0);
    let original = rs["original_max_position_embeddings"].as_u64();
    let derived = match engine {
        Engine::Vllm => {
            let model_type = c["model_type"]
                .as_str()
                .or_else(|| config["model_type"].as_str())
                .unwrap_or("");
            if ["su", "longrope", "llama3"].contains(&rope_type)
                || vram_model::hf::positions_include_rope_scaling(model_type)
            {
                return None;
            }
            let base = if rope_type == "yarn" {
                original.unwrap_or(positions)
            } else {
                positions
            };
            (base as f64 * factor) as u64
        }
        Engine::Sglang => {
            if original.is_some() || rope_type == "llama3" {
                return None;
            }
            (positions as f64 * factor) as u64
        }
    };
    (derived != positions && derived > 0).then_some(derived)
}

/// The longest context the engine accepts for a model of `positions` positions whose config
/// text is `config` (none: a catalog entry without one, or a checkpoint): the derived length, or
/// the positions themselves.
pub fn engine_max_len(config: Option<&str>, positions: u64, engine: Engine) -> u64 {
    config
        .and_then(|c| serde_json::from_str::<Value>(c).ok())
        .and_then(|c| derived_max_model_len(&c, positions, engine))
        .unwrap_or(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_scaling_by_each_engines_rule() {
        let yarn: Value = serde_json::json!({"model_type": "deepseek_v3", "max_position_embeddings": 163840,
            "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}});
        assert_eq!(derived_max_model_len(&yarn, 163840, Engine::Vllm), None); // 4096 x 40 = 163840
        assert_eq!(
            derived_max_model_len(&yarn, 163840, Engine::Sglang),
            None,
            "names the original"
        );
        let linear: Value = serde_json::json!({"rope_scaling": {"type": "linear", "factor": 4}});
        assert_eq!(
            derived_max_model_len(&linear, 4096, Engine::Vllm),
            Some(16384)
        );
        assert_eq!(
            derived_max_model_len(&linear, 4096, Engine::Sglang),
            Some(16384)
        );
        let llama3: Value =
            serde_json::json!({"rope_scaling": {"rope_type": "llama3", "factor": 8}});
        assert_eq!(derived_max_model_len(&llama3, 131072, Engine::Vllm), None);
        assert_eq!(engine_max_len(None, 8192, Engine::Vllm), 8192);
        assert_eq!(
            engine_max_len(
                Some(r#"{"rope_scaling": {"type": "dynamic", "factor": 2}}"#),
                8192,
                Engine::Vllm
            ),
            16384
        );
    }
}
