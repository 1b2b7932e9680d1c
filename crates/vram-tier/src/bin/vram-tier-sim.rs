//! `vram-tier-sim`: one training loop of `gpu/run.sh`, simulated.
//!
//! ```text
//! vram-tier-sim --request R.json      # re-plan a step the plug-in recorded, print the answer
//! vram-tier-sim --trace T.json --model NAME --native-s SECONDS --out-dir DIR
//!               [--cap-fraction F | --cap-states-out F] [--chunks K] [--fragmentation F]
//!               [--link-gbps G] [--link-latency-us U] [--cpu-adamw PARAMS_PER_S]
//! ```
//!
//! Reads a trace with phases (`vram trace --events`: vramkit's own model of the step, not a
//! GPU recording), scales its phases to the measured native step (`--native-s`), and writes
//! the files `gpu/run.sh device` writes for the same loop, in the same schema, so that
//! `gpu/summary.py` turns them into `summary.json`:
//! `train_NAME_{native,native_expandable,vramkit}.json` (step time, and peak reserved from a
//! replay of the trace under PyTorch's policy, expandable segments and vramkit's) and
//! `capped_NAME_{native,vramkit}.json` under the cap (`--cap-fraction`: that share of the
//! native peak reserved, as `gpu/run.sh` caps GPT-2; `--cap-states-out`: the native peak less
//! that share of the optimizer states, as it caps the Llama model): whether PyTorch's policy
//! runs out of memory there, and the planned tier's simulated step (`vram_tier::plan`) with
//! its floor. The plan keeps `--fragmentation` (default 2 %) of the cap free for what the
//! allocator reserves above what is allocated; the floor does not. Every file says where its
//! figures come from (`source`).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::process::ExitCode;
use vram_alloc::{replay, AllocatorConfig, Event, Policy};
use vram_tier::plan::{self, HostCpu, ItemKind, Link, Profile, Trace, TraceEvent};

struct Args {
    trace: String,
    model: String,
    native_s: f64,
    out_dir: String,
    cap_fraction: Option<f64>,
    cap_states_out: Option<f64>,
    chunks: usize,
    fragmentation: f64,
    link: Link,
    cpu: HostCpu,
}

fn parse() -> Result<Args, String> {
    let mut a = std::env::args().skip(1);
    let mut m: HashMap<String, String> = HashMap::new();
    while let Some(k) = a.next() {
        let Some(name) = k.strip_prefix("--") else {
            return Err(format!("unexpected argument {k:?}"));
        };
        let v = a.next().ok_or_else(|| format!("--{name} needs a value"))?;
        m.insert(name.to_string(), v);
    }
    let take = |m: &mut HashMap<String, String>, k: &str| m.remove(k);
    let num = |v: Option<String>, k: &str| -> Result<Option<f64>, String> {
        v.map(|s| {
            s.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("--{k} {s:?}: expected a non-negative number"))
        })
        .transpose()
    };
    let need = |v: Option<String>, k: &str| v.ok_or_else(|| format!("--{k} is required"));
    let trace = need(take(&mut m, "trace"), "trace")?;
    let model = need(take(&mut m, "model"), "model")?;
    let out_dir = need(take(&mut m, "out-dir"), "out-dir")?;
    let native_s = num(
        Some(need(take(&mut m, "native-s"), "native-s")?),
        "native-s",
    )?
    .unwrap_or(0.0);
    if native_s <= 0.0 {
        return Err("--native-s must be positive".into());
    }
    let cap_fraction = num(take(&mut m, "cap-fraction"), "cap-fraction")?;
    let cap_states_out = num(take(&mut m, "cap-states-out"), "cap-states-out")?;
    if cap_fraction.is_some() == cap_states_out.is_some() {
        return Err("give one of --cap-fraction and --cap-states-out".into());
    }
    let chunks = num(take(&mut m, "chunks"), "chunks")?.unwrap_or(8.0) as usize;
    let fragmentation = num(take(&mut m, "fragmentation"), "fragmentation")?.unwrap_or(0.02);
    if fragmentation >= 0.5 {
        return Err("--fragmentation is a fraction of the cap below 0.5".into());
    }
    let mut link = Link::H100_PROBE;
    if let Some(g) = num(take(&mut m, "link-gbps"), "link-gbps")? {
        link.d2h_bytes_per_s = g * 1e9;
        link.h2d_bytes_per_s = g * 1e9;
    }
    if let Some(u) = num(take(&mut m, "link-latency-us"), "link-latency-us")? {
        link.latency_s = u * 1e-6;
    }
    let mut cpu = HostCpu::VM_FUSED_ADAMW;
    if let Some(r) = num(take(&mut m, "cpu-adamw"), "cpu-adamw")? {
        cpu.adamw_params_per_s = r;
    }
    if let Some(k) = m.keys().next() {
        return Err(format!("unknown option --{k}"));
    }
    Ok(Args {
        trace,
        model,
        native_s,
        out_dir,
        cap_fraction,
        cap_states_out,
        chunks: chunks.max(1),
        fragmentation,
        link,
        cpu,
    })
}

fn alloc_events(t: &Trace) -> Vec<Event> {
    t.events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc { alloc, bytes, .. } => Some(Event::Alloc {
                id: *alloc,
                size: *bytes,
                stream: 0,
            }),
            TraceEvent::Free { free } => Some(Event::Free { id: *free }),
            TraceEvent::Phase { .. } => None,
        })
        .collect()
}

fn write(dir: &str, name: &str, v: &serde_json::Value) -> Result<(), String> {
    let path = std::path::Path::new(dir).join(name);
    let tmp = path.with_extension("partial");
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(a: &Args) -> Result<(), String> {
    use serde_json::json;
    let text =
        std::fs::read_to_string(&a.trace).map_err(|e| format!("cannot read {}: {e}", a.trace))?;
    let trace: Trace = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", a.trace))?;
    let source = format!(
        "simulated by vram-tier-sim from {} ({}); phase times scaled to the measured native step {:.4} s; link {:.0} GB/s each way, {:.0} µs a copy; host AdamW {:.2e} params/s; plans keep {:.0} % of the cap for fragmentation",
        a.trace,
        trace.source,
        a.native_s,
        a.link.d2h_bytes_per_s / 1e9,
        a.link.latency_s * 1e6,
        a.cpu.adamw_params_per_s,
        a.fragmentation * 100.0
    );
    let events = alloc_events(&trace);
    let replay_of = |policy: Policy, cap: Option<u64>| {
        replay::replay(&events, &AllocatorConfig::new(policy), cap).map_err(|e| e.to_string())
    };
    let native = replay_of(Policy::PyTorch, None)?;
    let expandable = replay_of(Policy::PyTorchExpandable, None)?;
    let ours = replay_of(Policy::Vramkit, None)?;
    let one = Profile::from_trace(&trace, 1)?.scaled_to(a.native_s);
    let states: u64 = one
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::OptimizerState)
        .map(|i| i.bytes)
        .sum();
    let cap = match (a.cap_fraction, a.cap_states_out) {
        (Some(f), _) => (native.peak_reserved_bytes as f64 * f) as u64,
        (_, Some(f)) => native.peak_reserved_bytes - (states as f64 * f) as u64,
        _ => unreachable!("checked in parse"),
    };
    let loop_file = |allocator: &str, r: &replay::PolicyResult| {
        json!({
            "model": a.model, "allocator": allocator, "source": source,
            "finished": true, "oom": false,
            "median_step_s": a.native_s, "mean_step_s": a.native_s,
            "peak_reserved_bytes": r.peak_reserved_bytes,
            "peak_allocated_bytes": r.peak_allocated_bytes,
            "optimizer_state_bytes": states,
        })
    };
    let m = &a.model;
    write(
        &a.out_dir,
        &format!("train_{m}_native.json"),
        &loop_file("native", &native),
    )?;
    write(
        &a.out_dir,
        &format!("train_{m}_native_expandable.json"),
        &loop_file("native_expandable", &expandable),
    )?;
    write(
        &a.out_dir,
        &format!("train_{m}_vramkit.json"),
        &loop_file("vramkit", &ours),
    )?;
    let capped_native = replay_of(Policy::PyTorch, Some(cap))?;
    write(
        &a.out_dir,
        &format!("capped_{m}_native.json"),
        &json!({
            "model": m, "allocator": "native", "source": source, "limit_bytes": cap,
            "oom": capped_native.would_oom.unwrap_or(false),
            "finished": !capped_native.would_oom.unwrap_or(false),
        }),
    )?;
    let p = Profile::from_trace(&trace, a.chunks)?.scaled_to(a.native_s);
    let fl = plan::floor(&p, cap, &a.link, &a.cpu);
    let planned_cap = (cap as f64 * (1.0 - a.fragmentation)) as u64;
    let decision = plan::decide(&p, planned_cap, &a.link, &a.cpu);
    let (peak, peak_phase) = p.peak();
    let mut out = json!({
        "model": m, "allocator": "vramkit", "source": source, "limit_bytes": cap,
        "oom": false,
        "optimizer_chunks": a.chunks,
        "planned_cap_bytes": planned_cap,
        "peak_allocated_bytes": peak, "peak_phase": p.phases[peak_phase].name,
        "floor_step_s": fl.step_s, "floor_slowdown": fl.step_s / a.native_s,
        "floor_phase": fl.phase.map(|q| p.phases[q].name.clone()),
        "floor_out_s": fl.out_s, "floor_in_s": fl.in_s, "floor_host_chunks": fl.host_chunks,
        "floor_method": fl.method,
    });
    match decision {
        Some(d) => {
            let o = &d.outcome;
            let moved: u64 = d.plan.moves.iter().map(|mv| p.items[mv.item].bytes).sum();
            let by_kind = |k: ItemKind| {
                d.plan
                    .moves
                    .iter()
                    .filter(|mv| p.items[mv.item].kind == k)
                    .map(|mv| p.items[mv.item].bytes)
                    .sum::<u64>()
            };
            let extra = json!({
                "finished": o.fits,
                "median_step_s": o.step_s, "mean_step_s": o.step_s,
                "strategy": format!("{:?}", d.strategy).to_lowercase(),
                "moves": d.plan.moves.len(), "moved_bytes": moved,
                "moved_bytes_by_kind": {
                    "activations": by_kind(ItemKind::Activation),
                    "parameters": by_kind(ItemKind::Parameter),
                    "gradients": by_kind(ItemKind::Gradient),
                    "optimizer_states": by_kind(ItemKind::OptimizerState),
                },
                "host_chunks": d.plan.host_chunks.len(),
                "d2h_bytes_per_step": o.d2h_bytes, "h2d_bytes_per_step": o.h2d_bytes,
                "host_cpu_s": o.cpu_s,
                "device_peak_bytes": o.peak_bytes,
                "stream_step_s": if d.stream.fits { Some(d.stream.step_s) } else { None },
                "host_update_step_s": d.host_update.as_ref().filter(|h| h.fits).map(|h| h.step_s),
                "host_update_chunks": d.host_chunks,
            });
            for (k, v) in extra.as_object().expect("an object") {
                out[k] = v.clone();
            }
        }
        None => {
            out["finished"] = json!(false);
            out["error"] =
                json!("no plan fits: some phase needs more than the cap of what it uses");
        }
    }
    write(&a.out_dir, &format!("capped_{m}_vramkit.json"), &out)?;
    println!(
        "{m}: native {:.4} s; cap {:.2} GB (peak allocated {:.2} GB at {}); simulated {} s ({}), floor {:.4} s ({:.2}x native)",
        a.native_s,
        cap as f64 / 1e9,
        peak as f64 / 1e9,
        p.phases[peak_phase].name,
        out["median_step_s"].as_f64().map_or("-".into(), |s| format!("{s:.4}")),
        out["strategy"].as_str().unwrap_or("none fits"),
        fl.step_s,
        fl.step_s / a.native_s
    );
    Ok(())
}

/// `vram-tier-sim --request FILE`: plans a step the plug-in recorded (the JSON the planned
/// tier sends to `vram_plan`; `vramkit.torch.planned().request_json` on a GPU run) and prints
/// the answer.
fn replan(path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let a = plan::answer(&text)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&a).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice() {
        if flag == "--request" {
            return match replan(path) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("vram-tier-sim: {e}");
                    ExitCode::from(2)
                }
            };
        }
    }
    match parse().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vram-tier-sim: {e}");
            ExitCode::from(2)
        }
    }
}
