//! End-to-end tests of `vram top`, `record`, `serve` and `report`, run on the
//! built binary with `--demo` (no GPU needed).

mod record;
mod report;
mod serve;
mod top;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Says on the test run's own stderr that `test` skips and why. libtest captures `eprintln!`
/// (and shows it only when a test fails); a write to the stderr handle itself is not captured,
/// so the line appears in `cargo test`'s output, and CI's, whether the test passes or not.
pub fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {reason}");
}

/// Headless Chromium, if installed; otherwise says that `test` skips, and why.
pub fn chromium(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .find_map(|name| {
                std::env::split_paths(&path)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
    });
    if found.is_none() {
        skip(
            test,
            "chromium is not installed (Debian package `chromium`, listed in .ci/apt-packages)",
        );
    }
    found
}

/// Run headless Chromium with `extra` args on `url`; bounded to 90 s.
pub fn run_chromium(bin: &Path, profile: &Path, extra: &[String], url: &str) -> String {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// Run `vram` with `args` to completion.
pub fn vram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .output()
        .expect("run vram")
}

/// A fresh directory under `target/tmp` for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("vram-monitor-e2e")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// stdout and stderr as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Without `--demo` the real source is used: on a machine without the NVIDIA
/// driver that must be exit code 2 with a one-line message, not a panic.
pub fn assert_real_source_ok_or_exit_2(o: &Output) {
    let (_, err) = text(o);
    if o.status.success() {
        eprintln!("a driver is present; the no-driver path was not exercised");
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("NVIDIA") && err.contains("--demo"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
