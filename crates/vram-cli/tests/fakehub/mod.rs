//! The loopback hub (`vram_hub::fake`) stocked with the repos the CLI tests and the README
//! read: `Qwen/Qwen3-8B` (its real config.json, the one in vram-model's catalog, and five
//! shards whose headers name every tensor transformers 5.24's Qwen3ForCausalLM has, in
//! bfloat16; the weights are virtual zeros, never sent) and `org/tiny` (a two-layer Llama).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use vram_hub::fake::{safetensors, FakeFile, FakeHub};

/// The tensors of a Llama-style decoder (Qwen3 adds per-head q/k norms) as transformers
/// names them, in bfloat16, from its config.
pub fn decoder_tensors(config: &str) -> Vec<(String, &'static str, Vec<u64>)> {
    let c: serde_json::Value = serde_json::from_str(config).unwrap();
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("config has no {k}"));
    let (h, i, v, layers) = (
        n("hidden_size"),
        n("intermediate_size"),
        n("vocab_size"),
        n("num_hidden_layers"),
    );
    let heads = n("num_attention_heads");
    let kv = c["num_key_value_heads"].as_u64().unwrap_or(heads);
    let hd = c["head_dim"].as_u64().unwrap_or(h / heads);
    let qk_norm = c["model_type"] == "qwen3";
    let mut t = vec![("model.embed_tokens.weight".to_string(), "BF16", vec![v, h])];
    for l in 0..layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push((p("input_layernorm.weight"), "BF16", vec![h]));
        t.push((p("self_attn.q_proj.weight"), "BF16", vec![heads * hd, h]));
        t.push((p("self_attn.k_proj.weight"), "BF16", vec![kv * hd, h]));
        t.push((p("self_attn.v_proj.weight"), "BF16", vec![kv * hd, h]));
        t.push((p("self_attn.o_proj.weight"), "BF16", vec![h, heads * hd]));
        if qk_norm {
            t.push((p("self_attn.q_norm.weight"), "BF16", vec![hd]));
            t.push((p("self_attn.k_norm.weight"), "BF16", vec![hd]));
        }
        t.push((p("post_attention_layernorm.weight"), "BF16", vec![h]));
        t.push((p("mlp.gate_proj.weight"), "BF16", vec![i, h]));
        t.push((p("mlp.up_proj.weight"), "BF16", vec![i, h]));
        t.push((p("mlp.down_proj.weight"), "BF16", vec![h, i]));
    }
    t.push(("model.norm.weight".to_string(), "BF16", vec![h]));
    if c["tie_word_embeddings"] != true {
        t.push(("lm_head.weight".to_string(), "BF16", vec![v, h]));
    }
    t
}

/// A repo's files: config.json, the index, and `shards` safetensors files splitting the
/// tensors in order.
pub fn checkpoint(config: &str, shards: usize) -> Vec<(String, FakeFile)> {
    let tensors = decoder_tensors(config);
    let per = tensors.len().div_ceil(shards);
    let mut files = vec![("config.json".to_string(), FakeFile::bytes(config))];
    let mut weight_map = serde_json::Map::new();
    for (k, chunk) in tensors.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", k + 1, shards);
        for (t, _, _) in chunk {
            weight_map.insert(t.clone(), name.clone().into());
        }
        files.push((name, safetensors(chunk)));
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    files.insert(
        1,
        (
            "model.safetensors.index.json".to_string(),
            FakeFile::bytes(serde_json::to_vec_pretty(&index).unwrap()),
        ),
    );
    files
}

pub const TINY: &str = r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "bfloat16",
    "tie_word_embeddings": false}"#;

/// Adds `files` as `repo` at a new commit of `main`/`master`.
pub fn add(hub: &FakeHub, repo: &str, files: &[(String, FakeFile)]) -> String {
    hub.add_repo(
        repo,
        files.iter().map(|(n, f)| (n.as_str(), f.clone())).collect(),
    )
}

/// A hub with `Qwen/Qwen3-8B` and `org/tiny`.
pub fn start() -> FakeHub {
    let hub = FakeHub::start();
    let qwen = vram_model::catalog::config_text("qwen3-8b").unwrap();
    add(&hub, "Qwen/Qwen3-8B", &checkpoint(qwen, 5));
    add(&hub, "org/tiny", &checkpoint(TINY, 2));
    hub
}

/// The environment a `vram` child needs to see only the fake hub: its endpoint, caches under
/// `dir`, no token, no proxy, online.
pub fn vars(hub: &FakeHub, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("HF_ENDPOINT", hub.endpoint.clone()),
        ("MODELSCOPE_DOMAIN", hub.endpoint.clone()),
        ("HF_HOME", dir.join("hf").display().to_string()),
        ("MODELSCOPE_CACHE", dir.join("ms").display().to_string()),
        ("VRAM_CACHE", dir.join("vram").display().to_string()),
        ("NO_PROXY", "*".into()),
        ("no_proxy", "*".into()),
    ]
}

/// The variables of the caller's environment that would change what `vram` reads from the hub
/// (`vram_hub::env`; it reads an empty one as unset).
pub const CALLER_VARS: &[&str] = &[
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "MODELSCOPE_OFFLINE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_DOWNLOAD_TIMEOUT",
];

/// `vars`, and `CALLER_VARS` removed.
pub fn env(cmd: &mut Command, hub: &FakeHub, dir: &Path) {
    for k in CALLER_VARS {
        cmd.env_remove(k);
    }
    for (k, v) in vars(hub, dir) {
        cmd.env(k, v);
    }
}
