//! What reading a model by Hub id costs, against the loopback hub (`vram_hub::fake`): a cold
//! fetch (HEAD and GET of config.json, the index, per shard the Hub's 302 and two Range
//! requests to the CDN: 18 requests), a warm cache (one `HEAD`),
//! offline (no request), and, for comparison, the same headers read from files on disk as a
//! local folder is read. The model is Qwen3-8B's shape: 5 shards, 399 tensors.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use vram_hub::fake::{safetensors, FakeFile, FakeHub};
use vram_hub::{Config, Hub};

fn files() -> Vec<(String, FakeFile)> {
    let (h, i, v, layers, q, kv, hd) =
        (4096u64, 12288u64, 151_936u64, 36, 4096u64, 1024u64, 128u64);
    let mut t = vec![("model.embed_tokens.weight".to_string(), "BF16", vec![v, h])];
    for l in 0..layers {
        for (n, s) in [
            ("input_layernorm.weight", vec![h]),
            ("self_attn.q_proj.weight", vec![q, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, q]),
            ("self_attn.q_norm.weight", vec![hd]),
            ("self_attn.k_norm.weight", vec![hd]),
            ("post_attention_layernorm.weight", vec![h]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("mlp.down_proj.weight", vec![h, i]),
        ] {
            t.push((format!("model.layers.{l}.{n}"), "BF16", s));
        }
    }
    t.push(("model.norm.weight".into(), "BF16", vec![h]));
    t.push(("lm_head.weight".into(), "BF16", vec![v, h]));
    let per = t.len().div_ceil(5);
    let mut out = vec![(
        "config.json".to_string(),
        FakeFile::bytes(r#"{"model_type": "qwen3"}"#),
    )];
    let mut map = serde_json::Map::new();
    for (k, chunk) in t.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-00005.safetensors", k + 1);
        for (n, _, _) in chunk {
            map.insert(n.clone(), name.clone().into());
        }
        out.push((name, safetensors(chunk)));
    }
    out.push((
        "model.safetensors.index.json".into(),
        FakeFile::bytes(serde_json::json!({"weight_map": map}).to_string()),
    ));
    out
}

fn read(cfg: &Config) -> usize {
    let mut repo = vram_hub::open(cfg, "Qwen/Qwen3-8B", None).unwrap();
    repo.text("config.json").unwrap();
    let index = repo
        .optional_text("model.safetensors.index.json")
        .unwrap()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&index).unwrap();
    let mut shards: Vec<&str> = v["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|s| s.as_str())
        .collect();
    shards.sort_unstable();
    shards.dedup();
    shards
        .iter()
        .map(|s| repo.safetensors_header(s).unwrap().unwrap().header.len())
        .sum()
}

fn bench(c: &mut Criterion) {
    let hub = FakeHub::start();
    let files = files();
    hub.add_repo(
        "Qwen/Qwen3-8B",
        files.iter().map(|(n, f)| (n.as_str(), f.clone())).collect(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = |name: &str| Config {
        hub: Hub::HuggingFace,
        endpoint: hub.endpoint.clone(),
        token: None,
        offline: false,
        cache: dir.path().join(name).join("hub"),
        header_cache: dir.path().join(name).join("vram"),
        metadata_timeout: Duration::from_secs(10),
        download_timeout: Duration::from_secs(10),
        tries: 3,
        backoff: Duration::from_millis(250),
        ca_bundle: None,
    };
    let mut g = c.benchmark_group("hub");
    let mut n = 0;
    g.bench_function("cold fetch (18 requests, headers only)", |b| {
        b.iter(|| {
            n += 1;
            read(&cfg(&format!("cold{n}")))
        })
    });
    let warm = cfg("warm");
    read(&warm);
    g.bench_function("warm cache (1 HEAD)", |b| b.iter(|| read(&warm)));
    let mut offline = warm.clone();
    offline.offline = true;
    g.bench_function("offline (no request)", |b| b.iter(|| read(&offline)));
    // The same five headers from whole files on disk, as a local folder is read.
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    for (name, f) in &files {
        if name.ends_with(".safetensors") {
            // Sparse beyond the header: only the header is read.
            let file = std::fs::File::create(local.join(name)).unwrap();
            std::io::Write::write_all(&mut &file, &f.head).unwrap();
            file.set_len(f.len).unwrap();
        }
    }
    g.bench_function("the same headers from local files", |b| {
        b.iter(|| {
            let mut total = 0;
            for (name, _) in files.iter().filter(|(n, _)| n.ends_with(".safetensors")) {
                let mut f = std::fs::File::open(local.join(name)).unwrap();
                let mut len = [0u8; 8];
                std::io::Read::read_exact(&mut f, &mut len).unwrap();
                let mut h = vec![0u8; u64::from_le_bytes(len) as usize];
                std::io::Read::read_exact(&mut f, &mut h).unwrap();
                total += 8 + h.len();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
