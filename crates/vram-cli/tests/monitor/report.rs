use std::path::{Path, PathBuf};

use crate::{chromium, run_chromium, scratch, text, vram};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-report/tests/data")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Writes what `vram ARGS` prints into `out`.
fn save(args: &[&str], out: &Path) {
    let o = vram(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    std::fs::write(out, &o.stdout).unwrap();
}

#[test]
fn report_of_a_recording_is_one_offline_html_file() {
    let d = scratch("report-rec");
    let f = d.join("t.jsonl");
    let html = d.join("t.html");
    // 120 demo samples one second apart (the leak check wants 90 s of
    // readings; `vram record --demo` at 10 ms would span 0.4 s).
    let mut src = vram_monitor::SimulatedSource::demo();
    let lines: Vec<String> = (0..120)
        .map(|k| {
            use vram_monitor::Source;
            src.sample(1_700_000_000_000 + k * 1000)
                .unwrap()
                .to_json_line()
                + "\n"
        })
        .collect();
    std::fs::write(&f, lines.concat()).unwrap();
    let o = vram(&[
        "report",
        f.to_str().unwrap(),
        "--out",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).1.contains("(recording)"));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains(">LEAK<"));
    assert!(!page.contains("<script"));
    // The only URL is the SVG namespace name, which is never fetched.
    assert_eq!(
        page.matches("http").count(),
        page.matches("http://www.w3.org/2000/svg").count()
    );
}

#[test]
fn reports_of_estimate_plan_and_replay_json() {
    let d = scratch("report-json");
    let est = d.join("estimate.json");
    save(&["estimate", "gpt2", "--json"], &est);
    let plan = d.join("plan.json");
    save(
        &[
            "plan",
            "gpt2",
            "--gpu",
            "a100-80g",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "1024",
            "--top",
            "3",
            "--json",
        ],
        &plan,
    );
    for (input, kind, needle) in [
        (
            est.to_string_lossy().into_owned(),
            "estimate",
            "Breakdown at peak",
        ),
        (
            plan.to_string_lossy().into_owned(),
            "plan",
            "Parallelism plans",
        ),
        (fixture("replay.json"), "replay", "Peak reserved"),
    ] {
        let name = Path::new(&input)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let out = d.join(format!("{name}.html"));
        let o = vram(&["report", &input, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{name}: {}", text(&o).1);
        assert!(text(&o).1.contains(&format!("({kind})")));
        assert!(
            std::fs::read_to_string(&out).unwrap().contains(needle),
            "{name}"
        );
    }
}

#[test]
fn unrecognised_or_missing_input_is_a_one_line_error_exit_2() {
    let d = scratch("report-bad");
    let bad = d.join("bad.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    for input in [bad.to_str().unwrap(), "/nonexistent/x.json"] {
        let o = vram(&["report", input, "--out", d.join("o.html").to_str().unwrap()]);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert!(!d.join("o.html").exists());
}

#[test]
fn demo_report_needs_no_input() {
    let d = scratch("report-demo");
    let out = d.join("demo.html");
    let o = vram(&["report", "--demo", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(
        page.contains(">120<") && page.contains(">LEAK<"),
        "120 samples, the notebook flagged"
    );
    assert_eq!(
        vram(&["report"]).status.code(),
        Some(2),
        "INPUT or --demo is required"
    );
}

/// Measures the rendered page: the document's width against the 1280 px window, every table,
/// chart, paragraph and list inside it, wide tables not scrolled, and every pair of SVG texts in
/// one chart not overlapping (nor running out of their chart). Writes the findings as JSON into
/// `<pre id="layout-check">`, which `--dump-dom` prints.
const LAYOUT_CHECK: &str = r##"<script>
(function () {
  const vw = document.documentElement.clientWidth;
  const out = { vw: vw, scroll: document.documentElement.scrollWidth, wide: [], scrolled: [], overlaps: [], outside: [] };
  document.querySelectorAll("table, svg, p, ul, h1, h2, pre").forEach(function (e) {
    const r = e.getBoundingClientRect();
    if (r.right > vw + 0.5 || r.left < -0.5) out.wide.push(e.tagName + "#" + e.id + " " + Math.round(r.left) + ".." + Math.round(r.right));
  });
  document.querySelectorAll("div.wide").forEach(function (d) {
    if (d.scrollWidth > d.clientWidth + 1) out.scrolled.push(d.firstElementChild.id);
  });
  document.querySelectorAll("svg").forEach(function (svg, k) {
    const box = svg.getBoundingClientRect();
    const ts = Array.from(svg.querySelectorAll("text")).map(function (t) { return [t.textContent, t.getBoundingClientRect()]; });
    ts.forEach(function (a) {
      const r = a[1];
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5) out.outside.push("chart " + k + ": " + a[0]);
    });
    for (let i = 0; i < ts.length; i++) for (let j = i + 1; j < ts.length; j++) {
      const a = ts[i][1], b = ts[j][1];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 0.5 && h > 0.5) out.overlaps.push("chart " + k + ": '" + ts[i][0] + "' and '" + ts[j][0] + "'");
    }
  });
  const pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"##;

/// The estimate, plan, replay and capacity pages, as `vram report` writes them for real output, in
/// headless Chromium at 1280 px: nothing wider than the window, no overlapping or clipped chart
/// labels, a screenshot of each (in the target directory, to look at), and what a person reads
/// on them (names, not JSON keys; sizes, not byte counts).
#[test]
fn report_pages_read_well_in_headless_chromium_at_1280_px() {
    let Some(bin) = chromium("report_pages_read_well_in_headless_chromium_at_1280_px") else {
        return;
    };
    let d = scratch("report-chromium");
    let run = |args: &[&str], out: &Path| {
        let o = vram(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        std::fs::write(out, &o.stdout).unwrap();
    };
    let est = d.join("estimate.json");
    run(
        &[
            "estimate",
            "llama-3-8b",
            "--gpu",
            "h100-80g",
            "--json",
            "--timeline",
        ],
        &est,
    );
    let plan = d.join("plan.json");
    run(
        &[
            "plan",
            "llama-2-70b",
            "--gpu",
            "h100",
            "--gpus",
            "64",
            "--global-batch",
            "512",
            "--seq",
            "4096",
            "--top",
            "5",
            "--json",
        ],
        &plan,
    );
    let pickle = d.join("gpt2.pickle");
    let o = vram(&[
        "trace",
        "gpt2",
        "--steps",
        "2",
        "--out",
        pickle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = d.join("replay.json");
    run(
        &[
            "replay",
            pickle.to_str().unwrap(),
            "--capacity",
            "3GiB",
            "--json",
        ],
        &replay,
    );
    let cap = d.join("capacity.json");
    run(
        &[
            "capacity",
            "llama-3-70b",
            "--gpu",
            "a100-80g",
            "--tensor-parallel-size",
            "2",
            "--gpu-memory-utilization",
            "0.86",
            "--json",
        ],
        &cap,
    );
    // The headroom as a person reads it: a minus sign and GiB, the figure of the JSON.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&est).unwrap()).unwrap();
    let short = -v["headroom_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
    let headroom = format!("\u{2212}{short:.1} GiB");
    for (json, needles, absent) in [
        (
            &est,
            &[
                "GPU: NVIDIA H100 80GB SXM (79.2 GiB)",
                "training, bf16-amp",
                "does NOT fit",
                "GiB short",
                "would fit with <code>",
                // The LoRA and QLoRA steps the text suggests too.
                "would fit with <code>--finetune lora</code>",
                "would fit with <code>--finetune qlora</code>",
                "headroom</td>",
                headroom.as_str(),
                "optimizer states",
            ][..],
            &["headroom_bytes", "optimizer_states", "-97,"][..],
        ),
        (
            &plan,
            &["configuration</th>", "rc-full", "searched "][..],
            &["peak_bytes_per_gpu", "step_time_s", "amp_style"][..],
        ),
        (
            &replay,
            &["policy</th>", "OOM at 3.00 GiB", "pytorch-expandable"][..],
            &["peak_reserved_bytes", "first_oom_event"][..],
        ),
        (
            &cap,
            &[
                "with vLLM 0.11: max_model_len 8,192",
                "does NOT start",
                "largest max_model_len that would: ",
                "cheapest change that starts at max_model_len 8,192: <code>",
                "Available KV cache memory",
                "<td>KV cache</td>",
                "(gpu_memory_utilization 0.86)",
            ][..],
            &["kv_cache_bytes", "weights_bytes", "max_model_len_that_fits"][..],
        ),
    ] {
        let html = d.join(json.file_stem().unwrap()).with_extension("html");
        let o = vram(&[
            "report",
            json.to_str().unwrap(),
            "--out",
            html.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o).1);
        let page = std::fs::read_to_string(&html).unwrap();
        for n in needles {
            assert!(page.contains(n), "{}: no {n:?}", html.display());
        }
        for n in absent {
            assert!(!page.contains(n), "{}: shows {n:?}", html.display());
        }
        // Bars of different rows carry different labels.
        let checked = html.with_extension("check.html");
        std::fs::write(
            &checked,
            page.replace("</body>", &format!("{LAYOUT_CHECK}</body>")),
        )
        .unwrap();
        let url = format!("file://{}", checked.display());
        let dom = run_chromium(
            &bin,
            &d.join("profile-dom"),
            &["--window-size=1280,1000".into(), "--dump-dom".into()],
            &url,
        );
        let found = dom
            .split("<pre id=\"layout-check\">")
            .nth(1)
            .and_then(|r| r.split("</pre>").next())
            .unwrap_or_else(|| panic!("{}: the check did not run:\n{dom}", html.display()))
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"");
        let v: serde_json::Value = serde_json::from_str(&found).unwrap();
        assert_eq!(v["vw"], 1280, "{found}");
        assert!(
            v["scroll"].as_u64().unwrap() <= 1280,
            "{}: the page is wider than 1280 px: {found}",
            html.display()
        );
        for k in ["wide", "scrolled", "overlaps", "outside"] {
            assert_eq!(
                v[k].as_array().map(Vec::len),
                Some(0),
                "{}: {k}: {}",
                html.display(),
                v[k]
            );
        }
        let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "vram-report-{}.png",
            json.file_stem().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &bin,
            &d.join("profile-shot"),
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1280,1400".into(),
            ],
            &format!("file://{}", html.display()),
        );
        let png = std::fs::read(&shot).expect("screenshot written");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() > 20_000, "a real page: {} bytes", png.len());
    }
}

/// Three plans that differ only in what the old bar label left out (recomputation, sequence
/// parallelism, offload) get three labels.
#[test]
fn plan_bars_of_different_plans_have_different_labels() {
    let d = scratch("report-plan-labels");
    let o = vram(&[
        "plan",
        "llama-2-70b",
        "--gpu",
        "h100",
        "--gpus",
        "64",
        "--global-batch",
        "512",
        "--seq",
        "4096",
        "--top",
        "5",
        "--json",
    ]);
    assert!(o.status.success());
    let json = d.join("plan.json");
    std::fs::write(&json, &o.stdout).unwrap();
    let html = d.join("plan.html");
    assert!(vram(&[
        "report",
        json.to_str().unwrap(),
        "--out",
        html.to_str().unwrap()
    ])
    .status
    .success());
    let page = std::fs::read_to_string(&html).unwrap();
    let chart = page.split("<h2>Throughput (tokens/s)</h2>").nth(1).unwrap();
    let chart = chart.split("</svg>").next().unwrap();
    let labels: Vec<&str> = chart
        .split("text-anchor=\"end\" font-size=\"12\" fill=\"#222\">")
        .skip(1)
        .map(|t| t.split('<').next().unwrap())
        .collect();
    assert_eq!(labels.len(), 5, "{labels:?}");
    let mut distinct = labels.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{labels:?}");
}

/// Issue 31: the estimate page labelled two rows "weights" and printed "decode kernels
/// 1506.0000". Every figure now has one name, and counts read as counts.
#[test]
fn estimate_page_names_each_figure_once_and_counts_read_as_counts() {
    let d = scratch("report-labels");
    let json = d.join("est.json");
    save(
        &[
            "estimate",
            "gpt-oss-20b",
            "--inference",
            "--context",
            "1024",
            "--json",
        ],
        &json,
    );
    let html = d.join("est.html");
    let o = vram(&[
        "report",
        json.to_str().unwrap(),
        "--out",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let page = std::fs::read_to_string(&html).unwrap();
    for table in ["figures", "serving"] {
        let body = page
            .split(&format!("id=\"{table}\">"))
            .nth(1)
            .and_then(|r| r.split("</table>").next())
            .unwrap_or_else(|| panic!("no table {table}"));
        let labels: Vec<&str> = body
            .split("<tr><td>")
            .skip(1)
            .map(|r| r.split("</td>").next().unwrap())
            .collect();
        assert!(labels.len() > 3, "{table}: {labels:?}");
        let mut distinct = labels.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), labels.len(), "{table}: {labels:?}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let kernels = v["serving"]["decode_kernels"].as_f64().unwrap() as u64;
    assert!(
        page.contains(&format!(
            "<td>kernels launched per decode step</td><td title=\"{kernels}\">{}</td>",
            vram_model::fmt::thousands(kernels)
        )),
        "kernels as a count"
    );
    // No figure on the page is printed with four decimals (what the text never prints).
    let visible: String = page
        .split('>')
        .map(|s| s.split('<').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !visible
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .any(|w| w
                .split_once('.')
                .is_some_and(|(a, b)| !a.is_empty() && b.len() >= 4)),
        "a figure with four decimals on the page"
    );
    // The attention that runs, as the text says it.
    assert!(page.contains("attention eager"));
}
