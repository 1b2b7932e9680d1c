//! vram-hub against the loopback hub (`vram_hub::fake`): what is fetched, what is cached
//! where, how many requests, and the errors. No test touches the network.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vram_hub::fake::{safetensors, FakeFile, FakeHub};
use vram_hub::{open, Config, Error, Hub, Token};

const TOKEN: &str = "hf_secretTOKENvalue0123456789";

/// A tiny two-shard checkpoint: its config, index and shards.
fn checkpoint() -> Vec<(&'static str, FakeFile)> {
    let config = r#"{"model_type": "llama", "hidden_size": 64, "vocab_size": 128}"#;
    let a = safetensors(&[
        ("model.embed_tokens.weight".into(), "BF16", vec![128, 64]),
        (
            "model.layers.0.mlp.up_proj.weight".into(),
            "BF16",
            vec![256, 64],
        ),
    ]);
    let b = safetensors(&[("lm_head.weight".into(), "BF16", vec![128, 64])]);
    let index = r#"{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}}"#;
    vec![
        ("config.json", FakeFile::bytes(config)),
        ("model.safetensors.index.json", FakeFile::bytes(index)),
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ]
}

struct Env {
    hub: FakeHub,
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let hub = FakeHub::start();
        hub.accept_tokens(&[TOKEN, "hf_otherTOKEN"]);
        hub.add_repo("org/tiny", checkpoint());
        Env {
            hub,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cfg(&self, hub: Hub) -> Config {
        Config {
            hub,
            endpoint: self.hub.endpoint.clone(),
            token: None,
            offline: false,
            cache: self.dir.path().join(match hub {
                Hub::HuggingFace => "hf/hub",
                Hub::ModelScope => "ms/models",
            }),
            header_cache: self.dir.path().join("vram"),
            metadata_timeout: Duration::from_secs(5),
            download_timeout: Duration::from_secs(5),
            tries: 3,
            backoff: Duration::from_millis(10),
            ca_bundle: None,
        }
    }

    fn hf(&self) -> Config {
        self.cfg(Hub::HuggingFace)
    }
}

/// Reads the whole checkpoint as the CLI does: config, index, each shard's header.
fn read_all(
    cfg: &Config,
    id: &str,
    rev: Option<&str>,
) -> Result<(vram_hub::Repo, Vec<vram_hub::Shard>), Error> {
    let mut repo = open(cfg, id, rev)?;
    repo.text("config.json")?;
    let index = repo.optional_text("model.safetensors.index.json")?.unwrap();
    let v: serde_json::Value = serde_json::from_str(&index).unwrap();
    let mut files: Vec<String> = v["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    files.sort();
    files.dedup();
    let mut shards = Vec::new();
    for f in files {
        shards.push(repo.safetensors_header(&f)?.unwrap());
    }
    Ok((repo, shards))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_cold_fetch_transfers_headers_only_and_fills_the_standard_cache() {
    let env = Env::new();
    let mut cfg = env.hf();
    cfg.token = Some(Token::new(TOKEN, "HF_TOKEN"));
    let (repo, shards) = read_all(&cfg, "org/tiny", None).unwrap();
    let served = checkpoint();
    for s in &shards {
        let f = &served.iter().find(|(n, _)| *n == s.file).unwrap().1;
        assert_eq!(s.header, *f.head, "{}", s.file);
        assert_eq!(s.size, f.len);
        // What was served is a real safetensors file (the safetensors crate reads it).
        let whole = f.materialize();
        let st = safetensors::SafeTensors::deserialize(&whole).unwrap();
        assert!(!st.names().is_empty());
    }
    let hits = env.hub.hits();
    // The CDN sent exactly the header bytes: 8 + n for each shard, nothing of the weights.
    let cdn_bytes: u64 = hits
        .iter()
        .filter(|h| h.host == "cdn")
        .map(|h| h.body_bytes)
        .sum();
    let header_bytes: u64 = shards.iter().map(|s| s.header.len() as u64).sum();
    assert_eq!(cdn_bytes, header_bytes);
    for h in &hits {
        if h.path.ends_with(".safetensors") || h.host == "cdn" {
            assert!(
                h.range.is_some(),
                "a safetensors request without Range: {h:?}"
            );
        }
        if h.host == "cdn" {
            assert_eq!(
                h.authorization, None,
                "the token followed the redirect: {h:?}"
            );
        } else {
            assert_eq!(
                h.authorization.as_deref(),
                Some(&*format!("Bearer {TOKEN}"))
            );
        }
    }
    assert_eq!(repo.traffic().requests as usize, hits.len());
    // huggingface_hub's layout: the ref, the blobs, relative links, and no safetensors stub.
    let dir = cfg.cache.join("models--org--tiny");
    let commit = std::fs::read_to_string(dir.join("refs/main")).unwrap();
    assert_eq!(commit, repo.commit);
    let config = dir.join("snapshots").join(&commit).join("config.json");
    assert!(std::fs::read_link(&config)
        .unwrap()
        .starts_with("../../blobs"));
    for f in files_under(&cfg.cache) {
        let name = f.display().to_string();
        assert!(
            !name.ends_with(".safetensors"),
            "a header stub in the hub's cache: {name}"
        );
        assert!(!name.contains(".incomplete"), "{name}");
    }
    assert!(cfg.cache.join(".locks/models--org--tiny").is_dir());
    // The token is nowhere on disk.
    for f in files_under(env.dir.path()) {
        if let Ok(b) = std::fs::read(&f) {
            assert!(
                !String::from_utf8_lossy(&b).contains(TOKEN),
                "the token is in {}",
                f.display()
            );
        }
    }
}

#[test]
fn a_warm_cache_costs_one_request_and_a_commit_or_offline_none() {
    let env = Env::new();
    let cfg = env.hf();
    let (cold, shards) = read_all(&cfg, "org/tiny", None).unwrap();
    assert!(cold.traffic().requests >= 4, "{:?}", cold.traffic());
    let (warm, again) = read_all(&cfg, "org/tiny", None).unwrap();
    assert_eq!(warm.traffic().requests, 1, "one HEAD resolves main");
    assert_eq!(again, shards);
    let (pinned, _) = read_all(&cfg, "org/tiny", Some(&cold.commit)).unwrap();
    assert_eq!(pinned.traffic().requests, 0);
    let mut offline = cfg.clone();
    offline.offline = true;
    env.hub.clear_hits();
    let (off, again) = read_all(&offline, "org/tiny", None).unwrap();
    assert_eq!(off.traffic().requests, 0);
    assert!(env.hub.hits().is_empty());
    assert_eq!(again, shards);
}

#[test]
fn what_from_pretrained_downloaded_is_read_with_no_request() {
    let env = Env::new();
    let mut cfg = env.hf();
    cfg.offline = true;
    // Lay out the cache as huggingface_hub does after from_pretrained: real files.
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let dir = cfg.cache.join("models--org--tiny");
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), commit).unwrap();
    let snap = dir.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    for (name, f) in checkpoint() {
        std::fs::write(snap.join(name), f.materialize()).unwrap();
    }
    let (repo, shards) = read_all(&cfg, "org/tiny", None).unwrap();
    assert_eq!(repo.commit, commit);
    assert_eq!(repo.traffic().requests, 0);
    assert_eq!(shards.len(), 2);
    assert!(env.hub.hits().is_empty());
}

#[test]
fn offline_with_nothing_cached_says_what_to_download() {
    let env = Env::new();
    let mut cfg = env.hf();
    cfg.offline = true;
    let e = open(&cfg, "org/tiny", None).unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, Error::OfflineNotCached { .. }), "{m}");
    assert!(
        m.contains("huggingface-cli download org/tiny config.json"),
        "{m}"
    );
    assert!(m.contains("local folder"), "{m}");
    assert!(env.hub.hits().is_empty());
}

#[test]
fn the_hubs_errors_become_one_line_each() {
    let env = Env::new();
    env.hub.add_repo("org/gated", checkpoint());
    env.hub.gate("org/gated", &[TOKEN]);
    env.hub.add_repo(
        "org/gguf",
        vec![("model-q4_k_m.gguf", FakeFile::lfs(b"GGUF".to_vec(), 4096))],
    );
    env.hub.add_repo(
        "org/pipe",
        vec![
            ("model_index.json", FakeFile::bytes("{}")),
            ("unet/config.json", FakeFile::bytes("{}")),
        ],
    );
    let cfg = env.hf();
    let with = |t: &str| {
        let mut c = env.hf();
        c.token = Some(Token::new(t, "HF_TOKEN"));
        c
    };
    let cases: Vec<(Result<vram_hub::Repo, Error>, &str)> = vec![
        (open(&cfg, "org/gated", None), "accept its licence at"),
        (
            open(&with("hf_otherTOKEN"), "org/gated", None),
            "has not been granted access",
        ),
        (
            open(&with("hf_wrong"), "org/tiny", None),
            "refused the token from HF_TOKEN",
        ),
        (open(&cfg, "org/nothing", None), "repo not found"),
        (
            open(&cfg, "org/tiny", Some("v9")),
            "revision `v9` not found",
        ),
        (
            open(&cfg, "org/gguf", None),
            "GGUF files only (model-q4_k_m.gguf)",
        ),
        (open(&cfg, "org/pipe", None), "diffusers pipeline"),
        (open(&cfg, "./org/tiny", None), "not a Hub repo id"),
    ];
    for (r, want) in cases {
        let e = r.unwrap_err();
        let m = e.to_string();
        assert!(m.contains(want), "{m}");
        assert!(!m.contains('\n'), "{m}");
        assert!(
            !m.contains(TOKEN) && !format!("{e:?}").contains(TOKEN),
            "{m}"
        );
        assert!(
            !m.contains("hf_wrong") && !m.contains("hf_otherTOKEN"),
            "{m}"
        );
    }
    let m = open(&cfg, "org/gated", None).unwrap_err().to_string();
    assert!(
        m.contains(&format!("{}/org/gated", env.hub.endpoint)) && m.contains("HF_TOKEN"),
        "{m}"
    );
    // Granted, it reads.
    assert!(read_all(&with(TOKEN), "org/gated", None).is_ok());
}

#[test]
fn a_renamed_repo_is_followed_with_a_note() {
    let env = Env::new();
    env.hub.rename("old/tiny", "org/tiny");
    let (repo, shards) = read_all(&env.hf(), "old/tiny", None).unwrap();
    assert_eq!(shards.len(), 2);
    assert!(
        repo.notes().iter().any(|n| n.contains("moved to org/tiny")),
        "{:?}",
        repo.notes()
    );
}

#[test]
fn transient_failures_are_tried_again_and_lasting_ones_reported() {
    let env = Env::new();
    env.hub.fail_next(&[503]);
    assert!(read_all(&env.hf(), "org/tiny", None).is_ok());
    env.hub.fail_next(&[502, 503, 500]);
    let m = open(&env.hf(), "org/tiny", None).unwrap_err().to_string();
    assert!(m.contains("answered HTTP 500 to 3 tries"), "{m}");
}

#[test]
fn a_slow_or_absent_hub_is_a_network_error_unless_the_cache_answers() {
    let env = Env::new();
    let mut cfg = env.hf();
    cfg.metadata_timeout = Duration::from_millis(300);
    env.hub.delay_next(1, Duration::from_secs(2));
    let m = open(&cfg, "org/tiny", None).unwrap_err().to_string();
    assert!(m.contains("no answer within 0.3 s"), "{m}");
    assert!(m.contains("huggingface-cli download org/tiny"), "{m}");
    // Nothing listens there.
    let mut down = cfg.clone();
    down.endpoint = "http://127.0.0.1:9".into();
    let m = open(&down, "org/tiny", None).unwrap_err().to_string();
    assert!(m.contains("cannot reach http://127.0.0.1:9"), "{m}");
    // With the model cached, the cache answers, saying so.
    read_all(&cfg, "org/tiny", None).unwrap();
    let (repo, shards) = read_all(&down, "org/tiny", None).unwrap();
    assert_eq!(shards.len(), 2);
    assert!(
        repo.notes()[0].contains("using the cached org/tiny@main"),
        "{:?}",
        repo.notes()
    );
}

#[test]
fn modelscope_is_served_through_its_own_paths_and_cache() {
    let env = Env::new();
    let cfg = env.cfg(Hub::ModelScope);
    let (repo, shards) = read_all(&cfg, "org/tiny", None).unwrap();
    assert_eq!(repo.revision, "master");
    assert_eq!(shards.len(), 2);
    let hits = env.hub.hits();
    assert!(
        hits.iter()
            .all(|h| h.path.starts_with("/api/v1/models/org/tiny/repo")),
        "{hits:?}"
    );
    let sent: u64 = hits
        .iter()
        .filter(|h| h.range.is_some())
        .map(|h| h.body_bytes)
        .sum();
    assert_eq!(
        sent,
        shards.iter().map(|s| s.header.len() as u64).sum::<u64>()
    );
    // ModelScope's cache folder holds the config; a second, offline read needs nothing.
    assert!(cfg.cache.join("org/tiny/config.json").is_file());
    let mut off = cfg.clone();
    off.offline = true;
    let (repo, again) = read_all(&off, "org/tiny", None).unwrap();
    assert_eq!(repo.traffic().requests, 0);
    assert_eq!(again, shards);
    let m = open(&cfg, "org/none", None).unwrap_err().to_string();
    assert!(m.contains("repo not found"), "{m}");
}
