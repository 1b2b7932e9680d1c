//! `vram serve --port P`: a live page, its JSON, and Prometheus `/metrics`.
//!
//! One thread samples at `--interval` into a shared [`History`]; the main
//! thread answers HTTP with tiny_http. Binds 127.0.0.1 unless `--bind` says
//! otherwise. There is no authentication, so binding elsewhere prints a
//! warning. `--max-requests` and `--max-seconds` bound the server (tests).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tiny_http::{Header, Method, Response, Server};
use vram_monitor::{prom, web, History};

use crate::monitor::{now_ms, open_source, parse_count, parse_interval, BadInput, SourceArgs};

fn parse_history(s: &str) -> Result<usize, String> {
    usize::try_from(parse_count(s)?).map_err(|_| format!("`{s}` is too large"))
}

/// Arguments of `vram serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// TCP port; 0 picks a free one (the address is printed on stdout).
    #[arg(long, default_value_t = 9411)]
    pub port: u16,
    /// Address to bind. Anything but loopback exposes process names without
    /// authentication.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// Time between samples: 100ms, 1s, 2.5s (10ms to 1h).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Samples kept for the charts.
    #[arg(long, default_value_t = 300, value_parser = parse_history)]
    pub history: usize,
    /// Exit after answering this many requests (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: Option<u64>,
    /// Exit after this many seconds (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_seconds: Option<u64>,
}

struct Shared {
    history: History,
    samples_total: u64,
    last_error: Option<String>,
}

fn header(k: &str, v: &str) -> Header {
    // Both are ASCII constants below, so this cannot fail.
    Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("ASCII header")
}

/// Serve until Ctrl-C or a `--max-*` bound.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let mut source = open_source(&args.source)?;
    let addr = SocketAddr::new(args.bind, args.port);
    let server =
        Server::http(addr).map_err(|e| BadInput(format!("cannot listen on {addr}: {e}")))?;
    let local = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow::anyhow!("server has no IP address"))?;
    if !args.bind.is_loopback() {
        eprintln!("vram serve: warning: listening on {local} without authentication");
    }
    let shared = Arc::new(Mutex::new(Shared {
        history: History::new(args.history),
        samples_total: 0,
        last_error: None,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    // Take the first sample before announcing, so the page is never empty.
    let first = source.sample(now_ms())?;
    {
        let mut s = shared
            .lock()
            .map_err(|_| anyhow::anyhow!("state poisoned"))?;
        s.history.push(first);
        s.samples_total = 1;
    }
    let sampler = {
        let (shared, stop, interval) = (shared.clone(), stop.clone(), args.interval);
        std::thread::spawn(move || {
            let mut next = Instant::now() + interval;
            while !stop.load(Ordering::SeqCst) {
                let now = Instant::now();
                if now < next {
                    std::thread::sleep((next - now).min(Duration::from_millis(50)));
                    continue;
                }
                next += interval;
                let r = source.sample(now_ms());
                let Ok(mut s) = shared.lock() else { break };
                match r {
                    Ok(sample) => {
                        s.history.push(sample);
                        s.samples_total += 1;
                        s.last_error = None;
                    }
                    Err(e) => s.last_error = Some(e.to_string()),
                }
            }
        })
    };
    {
        // The process's own stream, not `output::stdout`: the address is needed while the
        // server runs, and a captured run (`vramkit.cli`) would hand it over only at the end.
        let mut out = std::io::stdout().lock();
        writeln!(out, "vram serve: http://{local}/ (metrics at /metrics)")?;
        out.flush()?;
    }
    let started = Instant::now();
    let interval_ms = args.interval.as_millis() as u64;
    let mut answered = 0u64;
    while !stop.load(Ordering::SeqCst)
        && args.max_requests.is_none_or(|m| answered < m)
        && args
            .max_seconds
            .is_none_or(|m| started.elapsed() < Duration::from_secs(m))
    {
        let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        answered += 1;
        if !matches!(req.method(), Method::Get | Method::Head) {
            let _ =
                req.respond(Response::from_string("method not allowed\n").with_status_code(405));
            continue;
        }
        let path = req.url().split('?').next().unwrap_or("/").to_string();
        let (body, ctype, code) = {
            let Ok(s) = shared.lock() else { break };
            match path.as_str() {
                "/" | "/index.html" => (
                    web::page(&s.history.chart(), interval_ms),
                    "text/html; charset=utf-8",
                    200,
                ),
                "/api/state" => {
                    let mut state = s.history.chart();
                    state.last_error = s.last_error.clone();
                    let body = serde_json::to_string(&state)?;
                    (body, "application/json", 200)
                }
                "/metrics" => (
                    prom::render(s.history.latest(), s.samples_total),
                    prom::CONTENT_TYPE,
                    200,
                ),
                "/healthz" => ("ok\n".into(), "text/plain", 200),
                _ => ("not found\n".into(), "text/plain", 404),
            }
        };
        let resp = Response::from_string(body)
            .with_status_code(code)
            .with_header(header("Content-Type", ctype))
            .with_header(header("Cache-Control", "no-store"));
        let _ = req.respond(resp);
    }
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    eprintln!("vram serve: stopped after {answered} requests");
    Ok(())
}
