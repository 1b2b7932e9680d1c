//! `vram` against the real transformers (issue 21 item 3).
//!
//! `tests/zoo/expected.json` holds, for every config of `tests/zoo/configs`, what transformers
//! 5.24 itself builds and caches on the meta device (`tests/zoo/reference.py`; `.ci/zoo-tests`
//! regenerates it in CI and fails when it drifts). This test runs the `vram` binary on each
//! config and asserts, exactly:
//! - `vram estimate CFG --json`: `params` and every key of `params_by_component`;
//! - for every cache run (batch B, prompt P) of the config,
//!   `vram estimate CFG --inference --batch B --prompt P --new-tokens 1 --json`:
//!   `cache_after_prefill_bytes`, `cache_bytes_per_token` (after one decode step minus after the
//!   prefill) and `cache_by_kind` (`layers`, `after_prefill_bytes`, `after_decode_bytes` per
//!   kind; a kind one side lacks counts as zeros).
//!
//! Configs `vram` cannot do yet are listed in `PENDING` with the reason: they are skipped
//! loudly (a SKIP line each) and the lead prunes the list as the support lands. Every config
//! not in `PENDING` must match.

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

mod common;

/// Config name (file stem) -> why `vram` cannot match it yet. Prune as support lands.
const PENDING: &[(&str, &str)] = &[];

/// The keys of `params_by_component` (TEAM.md, issue 21).
const COMPONENTS: &[&str] = &[
    "embedding",
    "mixer",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "head",
    "vision",
    "mtp",
    "other",
];

/// Cache-layer kinds (DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer,
/// DynamicIndexedLayer).
const KINDS: &[&str] = &["full", "sliding", "linear", "indexed"];

fn zoo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo")
}

fn expected() -> Value {
    let path = zoo_dir().join("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("expected.json parses")
}

fn models(doc: &Value) -> &serde_json::Map<String, Value> {
    doc["models"]
        .as_object()
        .expect("expected.json has a models object")
}

fn u(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what}: not an unsigned integer: {v}"))
}

fn i(v: &Value, what: &str) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {v}"))
}

/// `vram ARGS`: Ok(stdout parsed as JSON) on exit 0, Err(one line) otherwise.
fn vram_json(args: &[String]) -> Result<Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .output()
        .expect("run vram");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "exit {}: {}",
            out.status.code().unwrap_or(-1),
            err.lines().next().unwrap_or("").trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("stdout is not JSON: {e}"))
}

/// One cache run of the reference (its batch B and prompt P) as `vram estimate CFG --inference
/// --batch B --prompt P --new-tokens 1 --json` answers it, tagged `bB pP`. No `--precision`:
/// vram's default for `generate` is the dtype from_pretrained's dtype="auto" loads, which the
/// reference built (`entry["dtype"]`), so a float32 checkpoint's cache is compared in float32
/// without being asked for, and the run must say it assumed fp32.
fn cache_run(cfg: &str, run: &Value, entry: &Value) -> (String, Result<Value, String>) {
    let (b, p) = (u(&run["batch"], "batch"), u(&run["prompt"], "prompt"));
    let (b, p) = (b.to_string(), p.to_string());
    let args = vec![
        "estimate",
        cfg,
        "--inference",
        "--batch",
        &b,
        "--prompt",
        &p,
        "--new-tokens",
        "1",
        "--json",
    ];
    let args: Vec<String> = args.into_iter().map(String::from).collect();
    let fp32 = entry["dtype"].as_str() == Some("float32");
    let out = vram_json(&args).and_then(|v| {
        let precision = v["setup"]["precision"].as_str().unwrap_or("");
        let said = v["notes"].as_array().is_some_and(|n| {
            n.iter().any(|n| {
                n.as_str()
                    .is_some_and(|n| n.starts_with("precision fp32 (no --precision)"))
            })
        });
        match (fp32, precision, said) {
            (true, "fp32", true) | (false, "bf16-amp", false) => Ok(v),
            _ => Err(format!(
                "default precision {precision} (note said: {said}) for a {} checkpoint",
                entry["dtype"]
            )),
        }
    });
    (format!("b{b} p{p}"), out)
}

/// Every mismatch between `vram` and the reference for one config (empty: it matches).
fn compare(name: &str, entry: &Value) -> Vec<String> {
    let cfg = zoo_dir().join("configs").join(format!("{name}.json"));
    let cfg = cfg.to_string_lossy().into_owned();
    let mut bad = Vec::new();

    match vram_json(&["estimate".into(), cfg.clone(), "--json".into()]) {
        Err(e) => bad.push(format!("estimate: {e}")),
        Ok(v) => {
            let want = u(&entry["params"], "params");
            match v["params"].as_u64() {
                Some(got) if got == want => {}
                got => bad.push(format!("params: vram {got:?}, transformers {want}")),
            }
            for key in COMPONENTS {
                let want = u(&entry["params_by_component"][key], key);
                match v["params_by_component"][key].as_u64() {
                    Some(got) if got == want => {}
                    got => bad.push(format!(
                        "params_by_component.{key}: vram {got:?}, transformers {want}"
                    )),
                }
            }
        }
    }

    for run in entry["cache"].as_array().expect("cache runs") {
        let (tag, v) = cache_run(&cfg, run, entry);
        let v = match v {
            Ok(v) => v,
            Err(e) => {
                bad.push(format!("{tag}: {e}"));
                continue;
            }
        };
        for key in ["cache_after_prefill_bytes", "cache_bytes_per_token"] {
            let want = i(&run[key], key);
            match v[key].as_i64() {
                Some(got) if got == want => {}
                got => bad.push(format!("{tag} {key}: vram {got:?}, transformers {want}")),
            }
        }
        for kind in KINDS {
            for field in ["layers", "after_prefill_bytes", "after_decode_bytes"] {
                let want = run["cache_by_kind"][kind][field].as_u64().unwrap_or(0);
                let got = if v["cache_by_kind"].is_object() {
                    Some(v["cache_by_kind"][kind][field].as_u64().unwrap_or(0))
                } else {
                    None
                };
                if got != Some(want) {
                    bad.push(format!(
                        "{tag} cache_by_kind.{kind}.{field}: vram {got:?}, transformers {want}"
                    ));
                }
            }
        }
    }
    bad
}

/// The reference file agrees with itself and with the configs on disk, whatever `vram` does.
#[test]
fn reference_file_is_whole() {
    let doc = expected();
    assert_eq!(
        doc["transformers"], "5.24.0",
        "expected.json comes from the pinned transformers"
    );
    assert_eq!(doc["device"], "meta");
    let models = models(&doc);
    let mut on_disk: Vec<String> = std::fs::read_dir(zoo_dir().join("configs"))
        .expect("tests/zoo/configs")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<String> = models.keys().cloned().collect();
    assert_eq!(
        listed, on_disk,
        "every config has one entry in expected.json and no other"
    );

    for (name, e) in models {
        let params = u(&e["params"], "params");
        let by = e["params_by_component"]
            .as_object()
            .expect("params_by_component");
        let keys: Vec<&str> = by.keys().map(|k| k.as_str()).collect();
        let mut want: Vec<&str> = COMPONENTS.to_vec();
        want.sort();
        assert_eq!(keys, want, "{name}: exactly the TEAM.md component keys");
        let sum: u64 = by.values().map(|v| u(v, "component")).sum();
        assert_eq!(sum, params, "{name}: components sum to params");
        assert_eq!(u(&by["other"], "other"), 0, "{name}: nothing unclassified");
        assert!(params > 0, "{name}: a model has parameters");

        let runs = e["cache"].as_array().expect("cache runs");
        assert!(runs.len() >= 2, "{name}: a short and a long prompt");
        let windows: Vec<u64> = e["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| u(w, "window"))
            .collect();
        let longest = runs
            .iter()
            .map(|r| u(&r["prompt"], "prompt"))
            .max()
            .unwrap();
        for w in &windows {
            assert!(
                longest > *w,
                "{name}: the long prompt {longest} passes the window {w}"
            );
        }
        for r in runs {
            let prefill = u(&r["cache_after_prefill_bytes"], "prefill");
            let decode = u(&r["cache_after_decode_bytes"], "decode");
            assert_eq!(
                i(&r["cache_bytes_per_token"], "per token"),
                decode as i64 - prefill as i64,
                "{name}"
            );
            let kinds = r["cache_by_kind"].as_object().expect("cache_by_kind");
            assert!(
                !kinds.is_empty(),
                "{name}: every model here caches something"
            );
            for k in kinds.keys() {
                assert!(
                    KINDS.contains(&k.as_str()),
                    "{name}: unknown cache kind {k}"
                );
            }
            let sp: u64 = kinds
                .values()
                .map(|k| u(&k["after_prefill_bytes"], "kind prefill"))
                .sum();
            let sd: u64 = kinds
                .values()
                .map(|k| u(&k["after_decode_bytes"], "kind decode"))
                .sum();
            assert_eq!(
                (sp, sd),
                (prefill, decode),
                "{name}: kinds sum to the totals"
            );
        }
    }
    for (name, _) in PENDING {
        assert!(
            models.contains_key(*name),
            "PENDING names {name}, which expected.json does not have"
        );
    }
    let sources =
        std::fs::read_to_string(zoo_dir().join("SOURCES.md")).expect("tests/zoo/SOURCES.md");
    for name in &on_disk {
        assert!(
            sources.contains(&format!("| `{name}.json` |")),
            "{name}.json: say where it comes from in tests/zoo/SOURCES.md"
        );
    }
}

/// `f` on every item, on up to eight threads at once (each runs `vram` processes), in order.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let done: Vec<Vec<(usize, R)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(k) else { break };
                        mine.push((k, f(item)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    for (k, r) in done.into_iter().flatten() {
        results[k] = Some(r);
    }
    results
        .into_iter()
        .map(|r| r.expect("every item done"))
        .collect()
}

/// Every config's mismatches, `vram` run on several configs at once (each a process).
fn compare_all(models: &serde_json::Map<String, Value>) -> Vec<Vec<String>> {
    let entries: Vec<(&String, &Value)> = models.iter().collect();
    par_map(&entries, |(name, entry)| compare(name, entry))
}

/// `vram` equals the reference on every config not in `PENDING`.
#[test]
fn vram_matches_transformers() {
    let doc = expected();
    let models = models(&doc);
    let all = compare_all(models);
    let mut failed = Vec::new();
    println!(
        "{:<34} {:>18} {:>6}  result",
        "config", "params (transformers)", "runs"
    );
    for ((name, entry), bad) in models.iter().zip(all) {
        let params = u(&entry["params"], "params");
        let runs = entry["cache"].as_array().map_or(0, |r| r.len());
        let pending = PENDING.iter().find(|(n, _)| n == name).map(|(_, why)| *why);
        let result = match (pending, bad.is_empty()) {
            (None, true) => "ok".to_string(),
            (None, false) => {
                failed.push(format!("{name}:\n    {}", bad.join("\n    ")));
                format!("FAIL ({} mismatches)", bad.len())
            }
            (Some(why), false) => format!(
                "SKIP (PENDING: {why}; {} mismatches, first: {})",
                bad.len(),
                bad[0]
            ),
            (Some(_), true) => "ok, but PENDING: remove it from PENDING".to_string(),
        };
        println!("{name:<34} {params:>18} {runs:>6}  {result}");
        if pending.is_some() {
            // Straight to the process's stderr, past libtest's capture: a skip is never silent.
            let _ = writeln!(std::io::stderr(), "zoo: {name}: {result}");
        }
    }
    assert!(
        failed.is_empty(),
        "vram differs from transformers:\n  {}",
        failed.join("\n  ")
    );
}

/// Real configs of current models that `vram` cannot describe exactly, each with what it must
/// say (`tests/zoo/nearmiss`, sources in `tests/zoo/SOURCES.md`): a `model_type` this reader
/// does not know whose keys a generic decoder would misread is refused in one line naming the
/// key, with exit code 2; a multimodal wrapper it does not know around a decoder it does is
/// read as that decoder with a note that the tower is not counted.
/// What `vram` must say of a near miss: read, with this note and these parameters (exactly,
/// or more than the figure where it ends in twelve zeros), or refused with this line.
/// `Ok((a note the estimate carries, the parameters (1T: at least the 1T decoder), the vision
/// tower's and projector's parameters))`, or `Err(the one-line refusal)`.
type NearMiss = Result<(&'static str, u64, u64), &'static str>;

const NEAR_MISSES: &[(&str, NearMiss)] = &[
    // DeciLM / Nemotron-NAS: per-layer `block_configs` (own KV grouping and MLP width per
    // layer, some attention/MLP blocks dropped), `intermediate_size: null`.
    (
        "llama-3.3-nemotron-super-49b-v1",
        Err("model_type `nemotron-nas` is not known and its `block_configs` needs a family reader"),
    ),
    // MiMo-V2-Flash: MoE (hybrid sliding attention) under a model_type of its own.
    (
        "mimo-v2-flash",
        Err("model_type `mimo_v2_flash` is not known and its `n_routed_experts` needs a family reader"),
    ),
    // Step-3.7-Flash: MoE under a model_type of its own.
    (
        "step-3.7-flash",
        Err("model_type `step3p7` is not known and its `num_experts` needs a family reader"),
    ),
    // Kimi-K2.5: `kimi_k25` (MoonViT tower) around a `kimi_k2` text_config; at least the 1T
    // decoder is read, and the tower and projector as transformers 5.24 counts them on the meta
    // device (`tests/zoo/kimi_k25_expected.json`: 416,866,032 + 54,277,888).
    (
        "kimi-k2.5",
        Ok(("vision tower (Kimi-K2.5's MoonViT and projector): its weights are counted; its activations over images are not modelled (--images is refused)", 1_000_000_000_000, 471_143_920)),
    ),
];

#[test]
fn near_misses_are_refused_or_noted() {
    let dir = zoo_dir().join("nearmiss");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/zoo/nearmiss")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut listed: Vec<String> = NEAR_MISSES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every near-miss config has its expectation");
    for (name, want) in NEAR_MISSES {
        let cfg = dir.join(format!("{name}.json"));
        let out = Command::new(env!("CARGO_BIN_EXE_vram"))
            .args(["estimate".as_ref(), cfg.as_os_str(), "--json".as_ref()])
            .output()
            .expect("run vram");
        let stderr = String::from_utf8_lossy(&out.stderr);
        match want {
            Err(line) => {
                assert_eq!(
                    out.status.code(),
                    Some(2),
                    "{name}: exit code; stderr: {stderr}"
                );
                assert_eq!(
                    stderr.trim_end().lines().count(),
                    1,
                    "{name}: one line: {stderr}"
                );
                assert!(stderr.contains(line), "{name}: {stderr:?} lacks {line:?}");
                assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
            }
            Ok((note, params, vision)) => {
                assert!(out.status.success(), "{name}: {stderr}");
                let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
                // The model's notes, or the mechanisms' (where the vision tower's is).
                let notes: Vec<&Value> = v["notes"]
                    .as_array()
                    .expect("notes")
                    .iter()
                    .chain(v["mechanisms"].as_array().expect("mechanisms"))
                    .collect();
                assert!(
                    notes.iter().any(|n| n.as_str() == Some(note)),
                    "{name}: notes {notes:?} lack {note:?}"
                );
                assert_eq!(
                    v["params_by_component"]["vision"].as_u64(),
                    Some(*vision),
                    "{name}: the vision tower"
                );
                let got = v["params"].as_u64().unwrap();
                if *params == 1_000_000_000_000 {
                    assert!(got > *params, "{name}: the 1T decoder is read");
                } else {
                    assert_eq!(got, *params, "{name}: the text model, exactly");
                }
            }
        }
    }
}

// ---- every causal-LM type of transformers 5.24 (issue 31 item 4) ---------------------------

/// What `vram` made of one causal-LM type's default config (`tests/zoo/causal_lm/<type>.json`)
/// against `tests/zoo/causal_lm_expected.json` (`tests/zoo/causal_lm_reference.py`).
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Parameters and, where transformers fills a `DynamicCache`, the cache per kind, exactly.
    Exact,
    /// A multimodal wrapper read as its text model, with the note that its towers are not
    /// counted: exactly the parameters outside the towers, and the cache.
    TextModel,
    /// Parameters exactly; transformers' forward cannot fill a cache on meta from this default
    /// config (the reason), so there is no cache to be exact against.
    ParamsOnly(String),
    /// Exit 2 with one line on stderr and nothing on stdout.
    Refused(String),
    /// Anything else: a count that differs, a refusal that is not one line with exit 2.
    Wrong(String),
}

/// The note a reader adds when it reads a wrapper's text model without its towers.
const TOWER_NOTE: &str = "tower is not counted";

fn causal_lm_verdict(model_type: &str, entry: &Value) -> Verdict {
    let cfg = zoo_dir()
        .join("causal_lm")
        .join(format!("{model_type}.json"))
        .to_string_lossy()
        .into_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(["estimate", &cfg, "--json"])
        .output()
        .expect("run vram");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let lines: Vec<&str> = stderr.trim_end().lines().collect();
        return if out.status.code() == Some(2) && lines.len() == 1 && out.stdout.is_empty() {
            Verdict::Refused(lines[0].to_string())
        } else {
            Verdict::Wrong(format!(
                "exit {:?} with {} lines: {}",
                out.status.code(),
                lines.len(),
                lines.first().unwrap_or(&"")
            ))
        };
    }
    let v: Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => return Verdict::Wrong(format!("stdout is not JSON: {e}")),
    };
    let noted = v["notes"].as_array().is_some_and(|n| {
        n.iter()
            .any(|n| n.as_str().is_some_and(|s| s.contains(TOWER_NOTE)))
    });
    let want = u(&entry["params"], "params");
    let got = v["params"].as_u64();
    let text_model = noted && entry.get("params_without_towers").and_then(Value::as_u64) == got;
    if got != Some(want) && !text_model {
        let pct = got.map_or(f64::NAN, |g| (g as f64 / want as f64 - 1.0) * 100.0);
        return Verdict::Wrong(format!(
            "params: vram {got:?}, transformers {want} ({pct:+.1} %)"
        ));
    }
    let Some(runs) = entry["cache"].as_array() else {
        let why = entry["cache_error"].as_str().unwrap_or("no cache run");
        return Verdict::ParamsOnly(why.to_string());
    };
    for run in runs {
        let (tag, v) = cache_run(&cfg, run, entry);
        let v = match v {
            Ok(v) => v,
            Err(e) => return Verdict::Wrong(format!("{tag}: {e}")),
        };
        for kind in KINDS {
            for field in ["layers", "after_prefill_bytes", "after_decode_bytes"] {
                let want = run["cache_by_kind"][kind][field].as_u64().unwrap_or(0);
                let got = v["cache_by_kind"][kind][field].as_u64().unwrap_or(0);
                if got != want {
                    return Verdict::Wrong(format!(
                        "{tag} cache_by_kind.{kind}.{field}: vram {got}, transformers {want}"
                    ));
                }
            }
        }
    }
    if text_model && got != Some(want) {
        Verdict::TextModel
    } else {
        Verdict::Exact
    }
}

/// Every causal-LM type of the pinned transformers, on its default config: exact, or its text
/// model with the towers noted, or refused in one line with exit 2; never a wrong count with
/// exit 0. The counts are pinned so that a family that stops being exact shows.
#[test]
fn every_causal_lm_type_is_exact_or_refused() {
    let path = zoo_dir().join("causal_lm_expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("causal_lm_expected.json parses");
    assert_eq!(
        doc["transformers"], "5.24.0",
        "from the pinned transformers"
    );
    let all = models(&doc);
    let built: Vec<(&String, &Value)> = all
        .iter()
        .filter(|(_, e)| e.get("params").is_some())
        .collect();
    for (t, e) in all {
        let on_disk = zoo_dir()
            .join("causal_lm")
            .join(format!("{t}.json"))
            .exists();
        assert_eq!(
            on_disk,
            e.get("config_error").is_none(),
            "{t}: a config file exactly when its default config could be made"
        );
    }

    let verdicts = par_map(&built, |(t, e)| causal_lm_verdict(t, e));

    let mut counts = [0usize; 5];
    let mut wrong = Vec::new();
    for ((t, e), v) in built.iter().zip(verdicts) {
        let (i, line) = match &v {
            Verdict::Exact => (0, "exact".to_string()),
            Verdict::TextModel => (1, "text model, towers noted".to_string()),
            Verdict::ParamsOnly(why) => (2, format!("params exact; no cache on meta: {why}")),
            Verdict::Refused(l) => (
                3,
                format!("refused: {}", l.rsplit(".json: ").next().unwrap_or(l)),
            ),
            Verdict::Wrong(why) => {
                if !MERGE_PENDING.contains(&t.as_str()) {
                    wrong.push(format!("{t}: {why}"));
                }
                (4, format!("WRONG: {why}"))
            }
        };
        counts[i] += 1;
        println!("{t:<28} {:>18}  {line}", u(&e["params"], "params"));
    }
    let summary = format!(
        "{} causal-LM types, {} built on meta: {} exact, {} text model with towers noted, {} params exact (no cache on meta), {} refused, {} wrong",
        all.len(),
        built.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4]
    );
    println!("{summary}");
    let _ = writeln!(std::io::stderr(), "causal-LM types: {summary}");
    assert!(
        wrong.is_empty(),
        "silently wrong:\n  {}",
        wrong.join("\n  ")
    );
    // Pinned: a family that becomes exact raises the first count (update it); one that falls
    // back to a refusal shows here.
    assert_eq!(
        counts, CAUSAL_LM_COUNTS,
        "exact / text model / params only / refused / wrong changed: {summary}"
    );
}

/// exact, text model with towers noted, params exact (no cache on meta), refused, wrong.
const CAUSAL_LM_COUNTS: [usize; 5] = [73, 1, 2, 105, 0];

/// Types read wrongly on purpose while a family adapter is on its way (each must be empty when
/// a session ends; `mllama`'s cross-attention layers were the last: read/decoders.rs `mllama`).
const MERGE_PENDING: &[&str] = &[];

/// Every known family's reader understands each structural key its transformers config class
/// has (the keys of its default config, `tests/zoo/causal_lm`, and of its `text_config`), and
/// every `model_type` the reader knows by name says which keys those are.
#[test]
fn known_families_understand_their_class_keys() {
    use vram_model::hf::{keys, known_model_types};
    let known: Vec<&str> = known_model_types().collect();
    for t in &known {
        assert!(
            keys::understood(t).is_some(),
            "{t}: say in hf::keys::KNOWN which structural keys its reader understands"
        );
    }
    let mut missed = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(zoo_dir().join("causal_lm")).expect("tests/zoo/causal_lm") {
        let path = entry.expect("dir entry").path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mt = v["model_type"].as_str().expect("model_type");
        let Some(understood) = keys::understood(mt) else {
            continue;
        };
        checked += 1;
        let inner = v["text_config"].as_object().into_iter().flatten();
        for (k, val) in v.as_object().unwrap().iter().chain(inner) {
            let active = !(val.is_null() || val == &Value::Bool(false) || val == &Value::from(0));
            if keys::is_structural(k) && active && !understood.contains(&k.as_str()) {
                missed.push(format!("{mt}: {k}"));
            }
        }
    }
    assert!(
        checked >= 40,
        "the default configs of the known families: {checked}"
    );
    assert!(
        missed.is_empty(),
        "structural keys no reader row names:\n  {}",
        missed.join("\n  ")
    );
}

/// Kimi-K2.5 keeps its `quantization_config` (compressed-tensors, int4 group 32, the MoE
/// experts only) inside `text_config`. transformers 5.24 (`get_hf_quantizer`: the top level's,
/// else `get_text_config(decoder=True)`'s) and vLLM 0.10.2-0.22.1 (the top level's, else
/// `text_config`'s) both read it, and both say where. vLLM holds the int4 experts packed;
/// transformers 5.24 dequantizes them into its fused bf16 expert banks at load (run on the CPU:
/// `vram_model::blocks::Holder`), and the ignore list leaves every other linear in bf16, so the
/// estimate holds the bf16 model (1.87 TiB) and every output says so: held, as stored (what
/// the engines load) and what was dequantized at load, text, `--json` and HTML alike.
#[test]
fn quantization_config_in_text_config_is_read() {
    let cfg = zoo_dir().join("nearmiss/kimi-k2.5.json");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_vram"))
            .arg("estimate")
            .arg(&cfg)
            .args(args)
            .output()
            .expect("run vram");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json = run(&["--inference", "--json"]);
    let v: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["weights"], "compressed-tensors-w4a16-g32");
    let load = &v["weights_load"];
    let held = load["held_bytes"].as_u64().unwrap();
    let stored = load["stored_bytes"].as_u64().unwrap();
    let bf16 = load["dequantized_bytes"].as_u64().unwrap();
    // transformers holds everything in bf16: the experts dequantized at load, the rest as the
    // ignore list leaves it; not the whole step's dequantization.
    assert_eq!(held, bf16);
    assert_eq!(load["dequantized"], Value::Bool(false));
    assert_eq!(v["weights_bytes"].as_u64(), Some(held));
    assert!(
        load["dequantized_at_load"]
            .as_str()
            .is_some_and(|s| s.starts_with("the expert banks")),
        "{load}"
    );
    // As stored: int4 experts beside bf16 attention, shared experts and dense MLPs, well under
    // a third of bf16: the figure the note gives as the engines'.
    assert!(
        stored * 3 < bf16 && stored * 4 > bf16,
        "{stored} against {bf16}"
    );
    let notes = v["notes"].as_array().expect("notes");
    let engines = notes
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| {
            n.starts_with("transformers 5.24 loads compressed-tensors' expert weights dequantized")
        })
        .unwrap_or_else(|| panic!("notes {notes:?}"));
    let fmt = vram_model::fmt::bytes;
    assert!(
        engines.contains(&format!(
            "vLLM and SGLang keep the experts packed, {} in all",
            fmt(stored)
        )),
        "{engines}"
    );
    let note = "the quantization settings are read from `text_config.quantization_config` (the top level has none), where transformers 5.24 and vLLM 0.10.2+ both look";
    assert!(notes.iter().any(|n| n == note), "notes {notes:?}");
    // The text output says the same: held, why, what was dequantized, as stored.
    let text = run(&["--inference"]);
    assert!(text.contains(&format!("note: {note}")), "{text}");
    let line = format!(
        "weights held: {}, as the library loads them: the expert banks (",
        fmt(held)
    );
    assert!(text.contains(&line), "{text}");
    assert!(
        text.contains(&format!(
            "nothing else is quantized, so no weight stays packed; as stored (compressed-tensors-w4a16-g32 linears) they take {}, all dequantized {}",
            fmt(stored),
            fmt(bf16)
        )),
        "{text}"
    );
    // The HTML report of the same JSON.
    let html = common::unescape(&common::report("kimi", &json).0);
    for (label, b) in [
        ("weights held", held),
        ("weights as stored", stored),
        ("weights dequantized", bf16),
    ] {
        assert!(
            html.contains(label) && html.contains(&fmt(b)),
            "{label} {}",
            fmt(b)
        );
    }
    assert!(html.contains("dequantized at load"), "{html}");
    // Training holds them all dequantized, and says so against the stored figure.
    let text = run(&[]);
    assert!(
        text.contains(&format!(
            "weights held dequantized: {}, as the training step holds them at its precision; as stored (compressed-tensors-w4a16-g32 linears) they take {}",
            fmt(bf16),
            fmt(stored)
        )),
        "{text}"
    );
    // vLLM (0.10.2+) reads the same place: capacity's weights at TP 8 are an eighth of the
    // stored checkpoint, not of bf16, and it says so too.
    let cap = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(["capacity".as_ref(), cfg.as_os_str()])
        .args(["--gpu", "h200", "--tensor-parallel-size", "8", "--json"])
        .output()
        .expect("run vram");
    assert!(
        cap.status.success(),
        "{}",
        String::from_utf8_lossy(&cap.stderr)
    );
    let c: Value = serde_json::from_slice(&cap.stdout).expect("JSON");
    let per_gpu = c["weights_bytes"].as_u64().unwrap();
    // Int4 experts (~0.53 bytes a parameter with their scales) beside the bf16 attention,
    // shared experts and dense MLPs the ignore list keeps: well under a third of bf16.
    assert!(
        per_gpu * 8 * 3 < bf16 && per_gpu * 8 > bf16 / 4,
        "capacity's weights {per_gpu} x 8 against bf16 {bf16}"
    );
    let notes = c["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n == note), "capacity notes {notes:?}");
}

/// `vram capacity` on `cfg` with `args`: the exit code, `--json`'s object (or stderr) and the
/// text output.
fn capacity_both(cfg: &std::path::Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vram"));
        c.arg("capacity")
            .arg(cfg)
            .args(["--gpu", "h200", "--tensor-parallel-size", "8"]);
        c.args(args);
        if json {
            c.arg("--json");
        }
        c.output().expect("run vram")
    };
    let (j, t) = (run(true), run(false));
    assert_eq!(j.status.code(), t.status.code(), "{args:?}");
    let text =
        String::from_utf8_lossy(&t.stdout).into_owned() + &String::from_utf8_lossy(&t.stderr);
    let v = if j.status.success() {
        serde_json::from_slice(&j.stdout).expect("JSON")
    } else {
        Value::String(String::from_utf8_lossy(&j.stderr).into_owned())
    };
    (j.status.code(), v, text)
}

/// Every note of the `--json` answer is a `note:` line of the text answer.
fn notes_agree(v: &Value, text: &str) -> Vec<String> {
    let notes: Vec<String> = v["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    for n in &notes {
        assert!(text.contains(&format!("note: {n}")), "{n}\n{text}");
    }
    notes
}

/// Where the quantization settings sit only in `text_config`, capacity loads the weights as the
/// engine at its version does: vLLM 0.10.2 added the `text_config` fallback; 0.10.1.1 and older,
/// and SGLang 0.4/0.5 (`_parse_quant_hf_config`), read the top level only, unless the config
/// class copies the settings up, as Kimi-K2.5's `KimiK25Config` does.
#[test]
fn capacity_reads_the_quantization_settings_where_the_engine_does() {
    let kimi = zoo_dir().join("nearmiss/kimi-k2.5.json");
    // Kimi-K2.5 itself: vLLM 0.10.1 and 0.10.2 have no KimiK25ForConditionalGeneration; the
    // registry refuses first.
    for v in ["0.10.1", "0.10.2"] {
        let (code, err, _) = capacity_both(&kimi, &["--engine-version", v]);
        assert_ne!(code, Some(0), "{v}");
        let err = err.as_str().unwrap();
        assert!(err.contains("KimiK25ForConditionalGeneration"), "{err}");
        assert!(!err.contains("cannot load"), "{err}");
    }
    // SGLang (0.5.9, its first release with the model) reads the top level, where the config
    // class has copied the settings: the stored int4 experts, as vLLM counts them.
    let (code, vllm, _) = capacity_both(&kimi, &[]);
    assert_eq!(code, Some(0));
    let (code, sgl, text) = capacity_both(&kimi, &["--engine", "sglang"]);
    assert_eq!(code, Some(0), "{text}");
    let stored = vllm["weights_bytes"].as_u64().unwrap();
    let sgl_weights = sgl["weights_bytes"].as_u64().unwrap();
    assert!(
        sgl_weights.abs_diff(stored) * 50 < stored,
        "SGLang {sgl_weights} vs vLLM {stored}"
    );
    let notes = notes_agree(&sgl, &text);
    assert!(
        notes.iter().any(|n| n.starts_with("SGLang") && n.contains("reads the quantization settings at the top level only; the config class of `kimi_k25` copies `text_config.quantization_config` there")),
        "{notes:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let base: Value = serde_json::from_str(&std::fs::read_to_string(&kimi).unwrap()).unwrap();
    let write = |name: &str, f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    // The same config under the text model's class, which vLLM 0.10.1 has: KimiK25Config still
    // lifts the settings, so 0.10.1 loads the int4 experts as 0.10.2 does, and says why.
    let lifted = write("lifted.json", &|v| {
        v["architectures"] = serde_json::json!(["DeepseekV3ForCausalLM"])
    });
    let (code, old, text) = capacity_both(&lifted, &["--engine-version", "0.10.1"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, new, _) = capacity_both(&lifted, &["--engine-version", "0.10.2"]);
    assert_eq!(code, Some(0));
    assert_eq!(old["weights_bytes"], new["weights_bytes"]);
    assert!(
        old["weights_bytes"].as_u64().unwrap().abs_diff(stored) * 50 < stored,
        "0.10.1 {} vs {stored}",
        old["weights_bytes"]
    );
    let notes = notes_agree(&old, &text);
    assert!(
        notes.iter().any(|n| n.starts_with("vLLM 0.10.1 reads the quantization settings at the top level only; the config class of `kimi_k25` copies")),
        "{notes:?}"
    );
    // A wrapper whose config class copies nothing (a made-up model_type): the packed int4
    // experts have no place in the unquantized layers vLLM 0.10.1 and SGLang build.
    let wrapper = write("wrapper.json", &|v| {
        v["architectures"] = serde_json::json!(["DeepseekV3ForCausalLM"]);
        v["model_type"] = "k25_wrapper".into();
    });
    for args in [
        &["--engine-version", "0.10.1"][..],
        &["--engine", "sglang", "--engine-version", "0.5.3"][..],
    ] {
        let (code, err, text) = capacity_both(&wrapper, args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        let err = err.as_str().unwrap();
        assert!(err.contains("cannot load this: this config keeps its quantization settings in `text_config.quantization_config`"), "{err}");
        assert!(err.contains("(compressed-tensors-w4a16-g32)"), "{err}");
        assert!(text.contains(err.trim()), "{text}");
    }
    let (code, new, _) = capacity_both(&wrapper, &["--engine-version", "0.10.2"]);
    assert_eq!(code, Some(0));
    // The made-up wrapper builds no tower; Kimi-K2.5 holds its MoonViT and projector in bf16
    // beside the int4 experts, unscaled by them: the layers' q/k/v/proj and fc1/fc2 split 8
    // ways (vLLM's `kimi_k25_vit.py`), the patch and position embeddings, norms, biases and
    // the projector (`ReplicatedLinear`) whole.
    let (hv, i, depth, all) = (1152u64, 4304u64, 27u64, 416_866_032u64 + 54_277_888);
    let split = depth * (4 * hv * hv + 2 * hv * i);
    let tower = 2 * (split / 8 + (all - split));
    // The pinned release (0.11.1 or later) also loads FlashInfer MLA's 128 MiB module
    // workspace with the weights; 0.10.2 imports only the MLA backend it picks.
    let workspace = 128 << 20;
    assert_eq!(
        new["weights_bytes"].as_u64(),
        Some(stored - tower - workspace)
    );
    // A method the description does not lay out (fbgemm FP8, counted in the dtype by the
    // estimate, at a byte a weight by vLLM 0.10.2): 0.10.1 builds bf16 layers, about twice.
    let other = write("fbgemm.json", &|v| {
        v["architectures"] = serde_json::json!(["DeepseekV3ForCausalLM"]);
        v["model_type"] = "k25_wrapper".into();
        v["text_config"]["quantization_config"] =
            serde_json::json!({"quant_method": "fbgemm_fp8", "modules_to_not_convert": []});
    });
    let (code, old, text) = capacity_both(&other, &["--engine-version", "0.10.1"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, new, _) = capacity_both(&other, &["--engine-version", "0.10.2"]);
    assert_eq!(code, Some(0));
    let (o, n) = (
        old["weights_bytes"].as_u64().unwrap(),
        new["weights_bytes"].as_u64().unwrap(),
    );
    assert!(
        o * 10 > n * 19 && o * 10 < n * 21,
        "0.10.1 {o} vs 0.10.2 {n}"
    );
    let notes = notes_agree(&old, &text);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("vLLM 0.10.1 reads only the top level")
                && n.contains("the weights are counted unquantized, as it would load them")),
        "{notes:?}"
    );
}

/// Kimi-K2.5's tower is counted in the weights, but its activations over images are not
/// modelled: `--images` is refused in one line, exit 2, nothing on stdout.
#[test]
fn kimi_k25_images_are_refused_in_one_line() {
    let cfg = zoo_dir().join("nearmiss/kimi-k2.5.json");
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .arg("estimate")
        .arg(&cfg)
        .args(["--images", "1", "--image-size", "1024x768"])
        .output()
        .expect("run vram");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("Kimi-K2.5's MoonViT tower is counted in the weights"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
