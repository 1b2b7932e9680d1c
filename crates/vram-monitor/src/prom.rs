//! Prometheus text exposition format (version 0.0.4) for one sample.

use std::fmt::Write;

use crate::Sample;

/// Content type to send with [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Escape a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Commands are cut to this many characters to bound label size.
pub const MAX_COMMAND_CHARS: usize = 80;

/// Render the metrics for `sample`; `samples_total` is how many samples the
/// server has taken (a counter).
pub fn render(sample: Option<&Sample>, samples_total: u64) -> String {
    let mut o = String::new();
    let family = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
    };
    family(
        &mut o,
        "vram_samples_total",
        "counter",
        "Samples taken since the server started.",
    );
    let _ = writeln!(o, "vram_samples_total {samples_total}");
    let Some(s) = sample else {
        return o;
    };
    family(
        &mut o,
        "vram_last_sample_timestamp_seconds",
        "gauge",
        "Unix time of the newest sample.",
    );
    let _ = writeln!(
        o,
        "vram_last_sample_timestamp_seconds {}",
        s.t_ms as f64 / 1000.0
    );
    let gpu_labels = |g: &crate::GpuSample| {
        format!(
            "gpu=\"{}\",name=\"{}\",uuid=\"{}\"",
            g.index,
            escape_label(&g.name),
            escape_label(&g.uuid)
        )
    };
    family(
        &mut o,
        "vram_gpu_memory_total_bytes",
        "gauge",
        "Installed GPU memory in bytes.",
    );
    for g in &s.gpus {
        let _ = writeln!(
            o,
            "vram_gpu_memory_total_bytes{{{}}} {}",
            gpu_labels(g),
            g.memory_total_bytes
        );
    }
    family(
        &mut o,
        "vram_gpu_memory_used_bytes",
        "gauge",
        "GPU memory in use in bytes (all processes and the driver).",
    );
    for g in &s.gpus {
        let _ = writeln!(
            o,
            "vram_gpu_memory_used_bytes{{{}}} {}",
            gpu_labels(g),
            g.memory_used_bytes
        );
    }
    family(
        &mut o,
        "vram_gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period in which a kernel ran (0 to 1).",
    );
    for g in &s.gpus {
        if let Some(u) = g.utilization_pct {
            let _ = writeln!(
                o,
                "vram_gpu_utilization_ratio{{{}}} {}",
                gpu_labels(g),
                f64::from(u) / 100.0
            );
        }
    }
    family(
        &mut o,
        "vram_process_gpu_memory_bytes",
        "gauge",
        "GPU memory held by one process in bytes.",
    );
    for g in &s.gpus {
        for p in &g.processes {
            if let Some(b) = p.gpu_memory_bytes {
                let cmd: String = p.command.chars().take(MAX_COMMAND_CHARS).collect();
                let _ = writeln!(
                    o,
                    "vram_process_gpu_memory_bytes{{gpu=\"{}\",pid=\"{}\",user=\"{}\",command=\"{}\"}} {}",
                    g.index,
                    p.pid,
                    escape_label(&p.user),
                    escape_label(&cmd),
                    b
                );
            }
        }
    }
    o
}
