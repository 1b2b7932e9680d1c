//! End-to-end tests of `vram top`, `record`, `serve` and `report`, run on the
//! built binary with `--demo` (no GPU needed).

mod record;
mod report;
mod serve;
mod top;

use std::path::PathBuf;
use std::process::{Command, Output};

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
