use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{assert_real_source_ok_or_exit_2, chromium, run_chromium, scratch, vram};

/// `vram serve --demo` on 127.0.0.1 with an ephemeral port; killed on drop,
/// and bounded by --max-seconds in any case.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args([
            "serve",
            "--demo",
            "--port",
            "0",
            "--interval",
            "100ms",
            "--max-seconds",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "vram serve: http://127.0.0.1:PORT/ (metrics at /metrics)"
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    assert!(
        addr.starts_with("127.0.0.1:"),
        "binds loopback by default: {addr}"
    );
    Server { child, addr }
}

/// Minimal HTTP/1.0 request over loopback: (status, body).
fn request(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    (status, body)
}

#[test]
fn metrics_state_and_errors_over_http() {
    let srv = start();
    let (code, body) = request(&srv.addr, "GET", "/metrics");
    assert_eq!(code, 200);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus exposition format");
    let gauge = |name: &str, key: &str, val: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(key) == Some(val))
            .and_then(|s| match s.value {
                prometheus_parse::Value::Gauge(v) => Some(v),
                _ => None,
            })
    };
    assert_eq!(
        gauge("vram_gpu_memory_total_bytes", "gpu", "1"),
        Some(40.0 * 1024f64.powi(3))
    );
    assert!(gauge("vram_process_gpu_memory_bytes", "pid", "6001").is_some_and(|v| v > 3e9));
    assert!(body.contains("# TYPE vram_samples_total counter"));

    let (code, body) = request(&srv.addr, "GET", "/api/state");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["gpus"].as_array().map(Vec::len), Some(2));
    assert!(v["gpus"][0]["memory_used_bytes"].is_u64());
    assert_eq!(request(&srv.addr, "GET", "/nope").0, 404);
    assert_eq!(request(&srv.addr, "POST", "/metrics").0, 405);
}

#[test]
fn live_page_renders_in_headless_chromium_with_a_screenshot() {
    let Some(bin) = chromium("live_page_renders_in_headless_chromium_with_a_screenshot") else {
        return;
    };
    let srv = start();
    let url = format!("http://{}/", srv.addr);
    let d = scratch("serve-chromium");
    // The page embeds the state and renders synchronously; the virtual time
    // budget also lets at least one /api/state poll run before the dump.
    let dom = run_chromium(
        &bin,
        &d.join("profile-dom"),
        &["--virtual-time-budget=3000".into(), "--dump-dom".into()],
        &url,
    );
    for needle in [
        "data-gpu-count=\"2\"",
        "GPU 0 · Simulated H100 80GB HBM3",
        "GPU 1 · Simulated A100-SXM4-40GB",
        "data-pid=\"6001\"",
        "data-pid=\"4242\"",
        "class=\"series\"",
        "live · ",
    ] {
        assert!(
            dom.contains(needle),
            "rendered DOM lacks {needle:?}:\n{}",
            &dom[..dom.len().min(3000)]
        );
    }
    // The script's own text contains "disconnected"; look at the element.
    let status = dom
        .split("id=\"status\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or("");
    assert!(
        status.starts_with("live · "),
        "polling /api/state failed: {status:?}"
    );
    let n: usize = status["live · ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(n >= 1, "{status:?}");
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vram-serve.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &bin,
        &d.join("profile-shot"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1100".into(),
        ],
        &url,
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        png.len() > 20_000,
        "a real page, not a blank one: {} bytes",
        png.len()
    );
    eprintln!("screenshot kept at {}", shot.display());
}

#[test]
fn serve_without_a_driver_exits_2() {
    assert_real_source_ok_or_exit_2(&vram(&["serve", "--port", "0", "--max-seconds", "1"]));
}
