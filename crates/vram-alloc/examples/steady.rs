//! Device calls per training step under each policy, on snapshot pickles
//! given as arguments (or the synthetic presets): `cargo run -p vram-alloc
//! --example steady -- a.pickle b.pickle`. `SLACKS=0.005,0.05` adds rows for
//! the vramkit policy with those trim slacks. The figures of BENCHMARKS.md's
//! "Device calls per steady-state step" come from this.

use vram_alloc::replay::{device_calls_per_step, events_from_snapshot, replay, step_ends};
use vram_alloc::{synthetic, AllocatorConfig, Policy, Snapshot};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut traces = Vec::new();
    for path in std::env::args().skip(1) {
        let snap = Snapshot::from_pickle(&std::fs::read(&path)?)?;
        traces.push((path, events_from_snapshot(&snap).0));
    }
    if traces.is_empty() {
        for m in synthetic::presets() {
            traces.push((m.name.to_string(), synthetic::training_events(&m, 4)));
        }
    }
    for (name, events) in traces {
        let ends = step_ends(&events);
        if let Some(k) = std::env::var("VRAMFREEZE")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            let n = events[..ends[k - 1]]
                .iter()
                .filter(|e| matches!(e, vram_alloc::Event::Alloc { .. }))
                .count();
            std::env::set_var("VRAMT", n.to_string());
        }
        println!("{name}: {} events, step ends {ends:?}", events.len());
        let slacks: Vec<f64> = std::env::var("SLACKS")
            .unwrap_or_default()
            .split(',')
            .filter_map(|v| v.parse().ok())
            .collect();
        let mut cfgs: Vec<AllocatorConfig> = Policy::ALL
            .iter()
            .map(|&p| AllocatorConfig::new(p))
            .collect();
        for &s in &slacks {
            let mut c = AllocatorConfig::new(Policy::Vramkit);
            c.trim_slack = s;
            cfgs.push(c);
        }
        for cfg in cfgs {
            let p = cfg.policy;
            let r = replay(&events, &cfg, None)?;
            let per = device_calls_per_step(&events, &cfg, &ends)?;
            let show: Vec<String> = per
                .iter()
                .map(|c| {
                    format!(
                        "m{}/g{}/u{}/s{}",
                        c.maps, c.granules_mapped, c.unmaps, c.synchronising
                    )
                })
                .collect();
            println!(
                "  {:12} {:6} peak reserved {:8.3} GiB  per step (maps/granules/unmaps/syncs): {}",
                p.name(),
                cfg.trim_slack,
                r.peak_reserved_bytes as f64 / (1u64 << 30) as f64,
                show.join("  ")
            );
        }
    }
    Ok(())
}
