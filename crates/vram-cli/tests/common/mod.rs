//! What the CLI's test files share: running `vram`, its one-line refusal of bad input, and
//! `vram report` on a saved `--json` answer. Each test file is its own binary and uses a part.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `vram ARGS`: its exit code, stdout and stderr.
pub fn vram(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .output()
        .expect("run vram");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `vram ARGS` with `stdin` written to its standard input: its exit code, stdout and stderr.
pub fn vram_stdin(args: &[&str], stdin: impl AsRef<[u8]>) -> (i32, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vram");
    child
        .stdin
        .take()
        .expect("vram's stdin")
        .write_all(stdin.as_ref())
        .expect("write vram's stdin");
    let out = child.wait_with_output().expect("wait for vram");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The start-up log of a `vram capacity --json` answer (its `log` array), one line an entry.
pub fn log_lines(v: &serde_json::Value) -> Vec<&str> {
    v["log"]
        .as_array()
        .expect("a capacity answer's log")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect()
}

/// `vram ARGS` refused as bad input: exit 2, nothing on stdout, one line on stderr, which it
/// returns.
pub fn refused(args: &[&str]) -> String {
    let (code, out, err) = vram(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

/// `vram report INPUT --out PAGE`, as it ran.
pub fn report_file(input: &Path, page: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(["report".as_ref(), input.as_os_str()])
        .args(["--out".as_ref(), page.as_os_str()])
        .output()
        .expect("run vram")
}

/// `vram report` on a saved answer (`json`, `--json`'s output), which must succeed: the page as
/// written and what it said on stderr. Each call writes into a folder of its own under the test
/// target's temporary directory (tests run in parallel threads and several render the same kind;
/// `name` names the files), removed afterwards.
pub fn report(name: &str, json: &str) -> (String, String) {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("report-pages")
        .join(format!("{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (jf, hf) = (
        dir.join(format!("{name}.json")),
        dir.join(format!("{name}.html")),
    );
    std::fs::write(&jf, json).unwrap();
    let out = report_file(&jf, &hf);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{name}: {err}");
    let html = std::fs::read_to_string(&hf).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (html, err)
}

/// `html` with the five entities the report writes decoded (`&amp;` last, so that an escaped
/// entity stays one).
pub fn unescape(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
