//! Model arguments by Hub id (issue 32): every command resolves `org/name` through one
//! resolver against the loopback hub (`fakehub`), the caches, `--revision`, `--hub`, the
//! environment, and the errors. No test touches the network.

mod fakehub;

use std::path::{Path, PathBuf};
use std::process::Command;

use vram_hub::fake::{safetensors, FakeFile, FakeHub};

const TOKEN: &str = "hf_cliSECRETtoken987654321";

struct Run {
    code: i32,
    out: String,
    err: String,
}

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("hub")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vram_in(hub: &FakeHub, dir: &Path, extra: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vram"));
    cmd.args(args).current_dir(dir);
    fakehub::env(&mut cmd, hub, dir);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
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
fn an_estimate_by_hub_id_is_the_estimate_of_its_config_read_from_headers_only() {
    let hub = fakehub::start();
    let d = dir("qwen");
    let r = vram_in(&hub, &d, &[], &["estimate", "Qwen/Qwen3-8B", "--json"]);
    assert_eq!(r.code, 0, "{}", r.err);
    let by_id: serde_json::Value = serde_json::from_str(&r.out).unwrap();
    // The same config through the catalog: the same figures.
    let o = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(["estimate", "qwen3-8b", "--json"])
        .output()
        .unwrap();
    let catalog: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in ["params", "peak_bytes", "reserved_bytes", "total_bytes"] {
        assert_eq!(by_id[k], catalog[k], "{k}");
    }
    assert_eq!(by_id["model"], "Qwen/Qwen3-8B");
    // The headers name every tensor transformers builds: the cross-check agrees.
    assert_eq!(by_id["checkpoint_params"], catalog["params"]);
    // Only the headers crossed: the CDN sent 8 + n bytes per shard.
    let hits = hub.hits();
    let shards: Vec<_> = (1..=5)
        .map(|k| {
            hub.file(
                "Qwen/Qwen3-8B",
                "main",
                &format!("model-{k:05}-of-00005.safetensors"),
            )
            .unwrap()
        })
        .collect();
    let headers: u64 = shards.iter().map(|f| f.head.len() as u64).sum();
    let weights: u64 = shards.iter().map(|f| f.len).sum();
    let cdn: u64 = hits
        .iter()
        .filter(|h| h.host == "cdn")
        .map(|h| h.body_bytes)
        .sum();
    assert_eq!(cdn, headers, "of {weights} bytes of weights");
    assert!(hits.len() <= 3 + 3 * 5, "{} requests", hits.len());
    // The text says where the checkpoint is and that it agrees.
    let r = vram_in(&hub, &d, &[], &["estimate", "Qwen/Qwen3-8B"]);
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out
            .starts_with("Qwen/Qwen3-8B — 8,190,735,360 parameters"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("checkpoint on the Hub (Qwen/Qwen3-8B@")
            && r.out
                .contains("8,190,735,360 parameters (matches the config)"),
        "{}",
        r.out
    );
}

#[test]
fn every_command_that_takes_a_model_takes_a_hub_id() {
    let hub = fakehub::start();
    let d = dir("commands");
    std::fs::write(d.join("lengths.txt"), "100 200 300 400").unwrap();
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 5.00 GiB is reserved by PyTorch but unallocated.";
    let cases: Vec<Vec<&str>> = vec![
        vec!["estimate", "org/tiny"],
        vec![
            "plan",
            "org/tiny",
            "--gpu",
            "h100-80g",
            "--gpus",
            "1",
            "--global-batch",
            "8",
            "--seq",
            "512",
        ],
        vec!["capacity", "org/tiny", "--gpu", "h100-80g"],
        vec!["doctor", oom, "--model", "org/tiny"],
        vec!["checkpoint", "org/tiny"],
        vec!["batch", "org/tiny", "--lengths", "lengths.txt"],
        vec!["trace", "org/tiny", "--out", "trace.pickle"],
    ];
    for args in cases {
        let r = vram_in(&hub, &d, &[], &args);
        assert_eq!(r.code, 0, "vram {}: {}{}", args.join(" "), r.out, r.err);
    }
}

#[test]
fn a_warm_cache_makes_one_request_offline_none_and_transformers_layout_is_kept() {
    let hub = fakehub::start();
    let d = dir("warm");
    assert_eq!(vram_in(&hub, &d, &[], &["estimate", "org/tiny"]).code, 0);
    hub.clear_hits();
    let warm = vram_in(&hub, &d, &[], &["estimate", "org/tiny", "--json"]);
    assert_eq!(warm.code, 0, "{}", warm.err);
    let hits = hub.hits();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].method, "HEAD");
    hub.clear_hits();
    let off = vram_in(
        &hub,
        &d,
        &[("HF_HUB_OFFLINE", "1")],
        &["estimate", "org/tiny", "--json"],
    );
    assert_eq!(off.code, 0, "{}", off.err);
    assert!(hub.hits().is_empty());
    assert_eq!(off.out, warm.out);
    // huggingface_hub's layout under HF_HOME/hub; no safetensors file there.
    let repo = d.join("hf/hub/models--org--tiny");
    assert!(repo.join("refs/main").is_file());
    let names: Vec<String> = files_under(&d.join("hf"))
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with("/config.json")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.ends_with(".safetensors")),
        "{names:?}"
    );
}

#[test]
fn revisions_local_folders_and_catalog_ids_resolve_in_the_documented_order() {
    let hub = fakehub::start();
    let d = dir("order");
    let wide = fakehub::TINY.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 4");
    let files = fakehub::checkpoint(&wide, 1);
    hub.add_revision(
        "org/tiny",
        &["v2"],
        files.iter().map(|(n, f)| (n.as_str(), f.clone())).collect(),
    );
    let params = |r: &Run| -> u64 {
        assert_eq!(r.code, 0, "{}", r.err);
        serde_json::from_str::<serde_json::Value>(&r.out).unwrap()["params"]
            .as_u64()
            .unwrap()
    };
    let main = params(&vram_in(&hub, &d, &[], &["estimate", "org/tiny", "--json"]));
    let v2 = params(&vram_in(
        &hub,
        &d,
        &[],
        &["estimate", "org/tiny", "--revision", "v2", "--json"],
    ));
    assert!(v2 > main);
    // A folder of that name wins, saying which Hub id it shadows.
    std::fs::create_dir_all(d.join("org/tiny")).unwrap();
    let mut local = fakehub::TINY.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    local.insert_str(1, "\"_name_or_path\": \"local\", ");
    std::fs::write(d.join("org/tiny/config.json"), &local).unwrap();
    let r = vram_in(&hub, &d, &[], &["estimate", "org/tiny", "--json"]);
    let p = params(&r);
    assert!(p != main && p != v2);
    assert!(
        r.err
            .contains("note: the local folder org/tiny shadows the Hub id org/tiny"),
        "{}",
        r.err
    );
    // A run that then fails says so on its one error line, the note inside it.
    let r = vram_in(
        &hub,
        &d,
        &[],
        &["estimate", "org/tiny", "--kernels", "mxfp4"],
    );
    assert_eq!(r.code, 2, "{}", r.err);
    assert_eq!(r.err.trim_end().lines().count(), 1, "{}", r.err);
    assert!(
        r.err.contains("--kernels mxfp4 changes nothing")
            && r.err
                .contains("(note: the local folder org/tiny shadows the Hub id org/tiny"),
        "{}",
        r.err
    );
    // --hub reads the Hub's all the same.
    assert_eq!(
        params(&vram_in(
            &hub,
            &d,
            &[],
            &["estimate", "org/tiny", "--hub", "huggingface", "--json"]
        )),
        main
    );
    // --revision belongs to Hub ids.
    for m in ["llama-3-8b", "org/tiny"] {
        let r = vram_in(&hub, &d, &[], &["estimate", m, "--revision", "v2"]);
        assert_eq!(r.code, 2, "{}", r.err);
        assert!(r.err.contains("--revision is for a Hub id"), "{}", r.err);
    }
}

#[test]
fn modelscope_by_prefix_or_flag() {
    let hub = fakehub::start();
    let d = dir("ms");
    let a = vram_in(
        &hub,
        &d,
        &[],
        &["estimate", "modelscope:org/tiny", "--json"],
    );
    assert_eq!(a.code, 0, "{}", a.err);
    let b = vram_in(
        &hub,
        &d,
        &[],
        &["estimate", "org/tiny", "--hub", "modelscope", "--json"],
    );
    assert_eq!(a.out, b.out);
    assert!(d.join("ms/models/org/tiny/config.json").is_file());
    assert!(hub
        .hits()
        .iter()
        .all(|h| h.host == "cdn" || h.path.starts_with("/api/v1/models/")));
}

/// An error case: the environment added, the model, what the one line must say.
type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, &'a [&'a str]);

#[test]
fn errors_are_one_line_exit_2_and_never_show_the_token() {
    let hub = fakehub::start();
    hub.accept_tokens(&[TOKEN, "hf_otherCLItoken"]);
    let d = dir("errors");
    add_repo(&hub, "org/gated", &fakehub::checkpoint(fakehub::TINY, 1));
    hub.gate("org/gated", &[TOKEN]);
    hub.add_repo(
        "org/gguf",
        vec![("m-Q4_K_M.gguf", FakeFile::lfs(b"GGUF".to_vec(), 1 << 20))],
    );
    // A config whose checkpoint is of another model: the embedding is 256 × 32, not × 64.
    let mut wrong = fakehub::checkpoint(fakehub::TINY, 1);
    wrong.pop();
    wrong.push((
        "model-00001-of-00001.safetensors".into(),
        safetensors(&[("model.embed_tokens.weight".into(), "BF16", vec![256, 32])]),
    ));
    let index =
        r#"{"weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}"#;
    wrong[1].1 = FakeFile::bytes(index);
    add_repo(&hub, "org/wrong", &wrong);
    let token_file = d.join("hf/token");
    std::fs::create_dir_all(token_file.parent().unwrap()).unwrap();
    let cases: Vec<Case> = vec![
        (vec![], "org/gated", &["is gated: accept its licence at", "/org/gated and set HF_TOKEN"]),
        (vec![("HF_TOKEN", "hf_otherCLItoken")], "org/gated", &["has not been granted access"]),
        (vec![("HF_TOKEN", "hf_wrongCLItoken")], "org/tiny", &["refused the token from HF_TOKEN"]),
        (vec![], "org/missing", &["org/missing: repo not found on http://127.0.0.1:"]),
        (vec![], "org/gguf", &["has no config.json: it holds GGUF files only (m-Q4_K_M.gguf)"]),
        (vec![("HF_HUB_OFFLINE", "1")], "org/other", &["HF_HUB_OFFLINE is set", "huggingface-cli download org/other config.json"]),
        (vec![("HF_ENDPOINT", "http://127.0.0.1:9")], "org/other", &["cannot reach http://127.0.0.1:9", "local folder"]),
        (vec![], "org/wrong", &["the checkpoint's headers contradict config.json: its model.embed_tokens.weight is [256, 32] but config.json says vocab_size 256 × hidden_size 64"]),
    ];
    for (env, model, wants) in cases {
        let mut args = vec!["estimate", model];
        let r = vram_in(&hub, &d, &env, &args);
        assert_eq!(r.code, 2, "{model} {env:?}: {}{}", r.out, r.err);
        assert_eq!(r.err.trim().lines().count(), 1, "{}", r.err);
        for w in wants {
            assert!(r.err.contains(w), "{model}: {}", r.err);
        }
        args.push("--json");
        let j = vram_in(&hub, &d, &env, &args);
        for text in [&r.out, &r.err, &j.out, &j.err] {
            for t in [TOKEN, "hf_otherCLItoken", "hf_wrongCLItoken"] {
                assert!(!text.contains(t), "{text}");
            }
        }
    }
    // The token file `huggingface-cli login` writes opens the gated repo; the token goes to
    // the Hub only, never to the CDN, and never into the cache.
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    hub.clear_hits();
    let r = vram_in(&hub, &d, &[], &["estimate", "org/gated", "--json"]);
    assert_eq!(r.code, 0, "{}", r.err);
    let hits = hub.hits();
    assert!(hits
        .iter()
        .filter(|h| h.host == "hub")
        .all(|h| h.authorization.as_deref() == Some(&*format!("Bearer {TOKEN}"))));
    assert!(
        hits.iter()
            .filter(|h| h.host == "cdn")
            .all(|h| h.authorization.is_none()),
        "{hits:?}"
    );
    assert!(hits.iter().any(|h| h.host == "cdn"));
    for f in files_under(&d) {
        if f == token_file {
            continue;
        }
        if let Ok(b) = std::fs::read(&f) {
            assert!(
                !String::from_utf8_lossy(&b).contains(TOKEN),
                "{}",
                f.display()
            );
        }
    }
}

/// A token with line breaks in it (pasted across lines, `echo` into the token file) is
/// cleaned as huggingface_hub 2.4.0's `_clean_token` cleans it and opens the gated repo; one
/// that is only spaces and line breaks gives way to the token file; one still unfit for an
/// HTTP header is a one-line exit-2 error naming where it came from, never the token.
#[test]
fn a_token_with_line_breaks_is_cleaned_and_a_control_character_is_named() {
    let hub = fakehub::start();
    hub.accept_tokens(&[TOKEN]);
    let d = dir("token-clean");
    add_repo(&hub, "org/gated", &fakehub::checkpoint(fakehub::TINY, 1));
    hub.gate("org/gated", &[TOKEN]);
    let (head, tail) = TOKEN.split_at(9);
    let broken = format!(" {head}\r\n{tail}\n");
    let token_file = d.join("hf/token");
    std::fs::create_dir_all(token_file.parent().unwrap()).unwrap();
    for (env, file) in [
        (vec![("HF_TOKEN", broken.as_str())], None),
        (vec![("HUGGING_FACE_HUB_TOKEN", broken.as_str())], None),
        (vec![("HF_TOKEN", " \n")], Some(broken.as_str())),
    ] {
        match file {
            Some(f) => std::fs::write(&token_file, f).unwrap(),
            None => {
                let _ = std::fs::remove_file(&token_file);
            }
        }
        hub.clear_hits();
        let r = vram_in(&hub, &d, &env, &["estimate", "org/gated", "--json"]);
        assert_eq!(r.code, 0, "{env:?}: {}", r.err);
        assert!(hub
            .hits()
            .iter()
            .filter(|h| h.host == "hub")
            .all(|h| h.authorization.as_deref() == Some(&*format!("Bearer {TOKEN}"))));
    }
    let bell = format!("{head}\u{7}{tail}");
    let _ = std::fs::remove_file(&token_file);
    let r = vram_in(&hub, &d, &[("HF_TOKEN", &bell)], &["estimate", "org/gated"]);
    assert_eq!(r.code, 2, "{}", r.err);
    assert_eq!(r.err.trim().lines().count(), 1, "{}", r.err);
    assert!(
        r.err
            .contains("the token in HF_TOKEN holds a control character"),
        "{}",
        r.err
    );
    assert!(!r.err.contains(head) && !r.err.contains(tail), "{}", r.err);
    std::fs::write(&token_file, &bell).unwrap();
    let r = vram_in(&hub, &d, &[], &["estimate", "org/gated"]);
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(
        r.err
            .contains(&format!("the token in {} holds", token_file.display())),
        "{}",
        r.err
    );
    for text in [&r.out, &r.err] {
        assert!(!text.contains(head) && !text.contains(tail), "{text}");
    }
}

fn add_repo(hub: &FakeHub, id: &str, files: &[(String, FakeFile)]) {
    fakehub::add(hub, id, files);
}

/// A TLS server on loopback with a certificate for 127.0.0.1 signed by a test CA
/// (`tests/data/tls`, made with openssl for these tests, valid for 100 years): it answers
/// every request it reads with the Hub's 404 for a missing repo, and counts the requests.
fn tls_hub() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(data.join("server.pem"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(data.join("server.key")).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let requests = Arc::new(AtomicUsize::new(0));
    let count = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8).flatten() {
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = tls.write_all(b"HTTP/1.1 404 Not Found\r\nX-Error-Code: RepoNotFound\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = tls.flush();
            }
        }
    });
    (url, requests)
}

#[test]
fn tls_is_verified_against_the_roots_or_the_ca_bundle_named() {
    use std::sync::atomic::Ordering;
    let hub = fakehub::start();
    let d = dir("tls-verified");
    let (url, requests) = tls_hub();
    // webpki's roots do not know the test CA: the handshake fails, no request is made.
    let r = vram_in(
        &hub,
        &d,
        &[("HF_ENDPOINT", &url)],
        &["estimate", "org/tiny"],
    );
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(
        r.err.contains("TLS") && r.err.contains("REQUESTS_CA_BUNDLE"),
        "{}",
        r.err
    );
    assert_eq!(requests.load(Ordering::SeqCst), 0);
    // With the CA bundle named, the request goes through and the Hub's answer is read.
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls/ca.pem");
    for var in ["REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"] {
        let r = vram_in(
            &hub,
            &d,
            &[("HF_ENDPOINT", &url), (var, &ca.display().to_string())],
            &["estimate", "org/tiny"],
        );
        assert_eq!(r.code, 2, "{}", r.err);
        assert!(
            r.err
                .contains("org/tiny: repo not found on https://127.0.0.1"),
            "{var}: {}",
            r.err
        );
    }
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[test]
fn tls_is_verified_and_a_bad_ca_bundle_is_an_error() {
    let hub = fakehub::start();
    let d = dir("tls");
    // The loopback hub speaks plain HTTP: an https endpoint there fails the handshake, and
    // nothing falls back to an unverified or plain connection.
    let https = hub.endpoint.replace("http://", "https://");
    let r = vram_in(
        &hub,
        &d,
        &[("HF_ENDPOINT", &https), ("HF_HUB_ETAG_TIMEOUT", "2")],
        &["estimate", "org/tiny"],
    );
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(
        r.err.contains(&format!("cannot reach {https}")),
        "{}",
        r.err
    );
    assert!(hub.hits().is_empty(), "{:?}", hub.hits());
    // A CA bundle that is not one is said to be so, not ignored.
    std::fs::write(d.join("ca.pem"), "not a certificate").unwrap();
    let bundle = d.join("ca.pem").display().to_string();
    let r = vram_in(
        &hub,
        &d,
        &[("REQUESTS_CA_BUNDLE", &bundle)],
        &["estimate", "org/tiny"],
    );
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(r.err.contains("holds no PEM certificate"), "{}", r.err);
}
