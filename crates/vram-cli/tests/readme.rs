//! Every command example in README.md runs, and prints what the README shows.
//!
//! trycmd reads the README's ```` ```console ```` blocks: each `$ vram ...` line is run with the
//! `vram` built for this test, and its output (stdout and stderr together) must be the lines
//! under it. A line `...` stands for any number of lines, `[..]` for the rest of a line. When
//! the output changes on purpose, rewrite the blocks with
//! `TRYCMD=overwrite cargo test -p vram-cli --test readme` (elisions that still match are kept)
//! and read the diff. Python examples are checked by `python/tests/test_readme.py`.

mod fakehub;

use std::path::Path;
use std::process::Command;

fn readme() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")
}

/// The examples by Hub id (`vram estimate Qwen/Qwen3-8B`) are served by the loopback hub
/// (`fakehub`: Qwen3-8B's real config.json and its checkpoint's headers), through caches
/// made for this run; the catalog examples read built-in data.
#[test]
fn readme_examples_print_what_the_readme_shows() {
    let hub = fakehub::start();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-hub");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cases = trycmd::TestCases::new();
    cases.register_bin("vram", Path::new(env!("CARGO_BIN_EXE_vram")));
    for (k, v) in fakehub::vars(&hub, &dir) {
        cases.env(k, v);
    }
    // What the caller's environment would change: set empty, which vram reads as unset.
    for &k in fakehub::CALLER_VARS {
        cases.env(k, "");
    }
    cases.case(readme()).run();
    drop(cases);
    assert!(
        hub.hits()
            .iter()
            .any(|h| h.path == "/Qwen/Qwen3-8B/resolve/main/config.json"),
        "the README's Hub example did not reach the loopback hub"
    );
}

/// Every block that shows `$ vram ...` is one trycmd reads (`console`), so none is left out.
#[test]
fn every_command_example_is_a_console_block() {
    let text = std::fs::read_to_string(readme()).unwrap();
    let mut fence: Option<&str> = None;
    let mut console = 0;
    for (n, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            fence = match fence {
                None => Some(info.trim()),
                Some(_) => None,
            };
            if fence == Some("console") {
                console += 1;
            }
            continue;
        }
        if line.starts_with("$ vram ") {
            assert_eq!(
                fence,
                Some("console"),
                "README.md line {}: a `$ vram` example outside a ```console block is not run",
                n + 1
            );
        }
    }
    assert!(console >= 6, "{console} console blocks");
}

/// The trace/replay example is there to show a PyTorch-policy out-of-memory that vramkit's
/// policy avoids at the same capacity: whatever the figures become, that stays true.
#[test]
fn the_replay_example_shows_a_pytorch_oom_that_vramkit_avoids() {
    let text = std::fs::read_to_string(readme()).unwrap();
    let cmd = |prefix: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("README.md has no `{prefix}` example"));
        line["$ vram ".len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let pickle = dir.join("trace.pickle");
    let mut trace = cmd("$ vram trace ");
    let out = trace.iter().position(|a| a == "--out").unwrap() + 1;
    trace[out] = pickle.display().to_string();
    let vram = env!("CARGO_BIN_EXE_vram");
    assert!(Command::new(vram).args(&trace).status().unwrap().success());
    let mut replay = cmd("$ vram replay ");
    replay[1] = pickle.display().to_string();
    replay.push("--json".into());
    let o = Command::new(vram).args(&replay).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let oom = |name: &str| {
        v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no policy {name}"))["would_oom"]
            .as_bool()
            .unwrap()
    };
    assert!(
        oom("pytorch"),
        "the pytorch policy no longer runs out of memory at that capacity"
    );
    assert!(!oom("vramkit"), "vramkit's policy runs out of memory too");
}
