//! The sentences of each answer (the verdict, the fit searches, the suggestions, the notes) and
//! the text output built from them. The HTML page ([`crate::html`]) prints the same sentences,
//! so the two read alike.

use std::fmt::Write;

use vram_model::fmt::{bytes, thousands};
use vram_model::setup::Mode;

use crate::estimate::{EstimateReport, SearchChecked, StorageQuant, WeightsReport};
use crate::parts::{Bound, Speed};

/// The verdict on a device total against a GPU (named with its memory,
/// [`crate::parts::GpuRef::with_memory`]).
pub fn verdict(gpu: &crate::parts::GpuRef, total: u64) -> String {
    let cap = gpu.memory_bytes;
    let gpu = gpu.with_memory();
    if total <= cap {
        let room = cap - total;
        format!(
            "fits on {gpu}: {} free ({:.0}% headroom)",
            bytes(room),
            100.0 * room as f64 / cap as f64
        )
    } else {
        format!("does NOT fit on {gpu}: {} short", bytes(total - cap))
    }
}

/// The line printed when no suggestion fits: the changes tried, as flags (each one the job had
/// not made), or that none was left to try.
pub fn tried_line(tried: &[&str]) -> String {
    if tried.is_empty() {
        "no single change left to try (the setup already has each one vram tries)".into()
    } else {
        format!("no single change tried ({}) makes it fit", tried.join(", "))
    }
}

/// The serving-speed line of an inference estimate.
pub fn speed_line(s: &Speed) -> String {
    let (bound, other) = match s.decode_bound {
        Bound::Host => (
            format!(
                "host-bound: {:.0} kernels and {:.0} Python calls",
                s.decode_kernels, s.decode_calls
            ),
            format!(
                "GPU {:.1} ms for {:.2} GB",
                s.decode_gpu_s * 1e3,
                s.decode_bytes / 1e9
            ),
        ),
        Bound::Gpu => (
            format!("GPU-bound: {:.2} GB read and written", s.decode_bytes / 1e9),
            format!(
                "host {:.1} ms for {:.0} kernels and {:.0} Python calls",
                s.decode_host_s * 1e3,
                s.decode_kernels,
                s.decode_calls
            ),
        ),
    };
    format!(
        "serving speed (transformers generate, one GPU; {}): prefill {:.3} s, decode {:.1} ms/token ({bound}; {other}), {:.0} tokens/s",
        s.checks,
        s.prefill_s,
        s.decode_token_s * 1e3,
        s.decode_tokens_per_s
    )
}

/// The line of one fit search's answer `n`: `full` (as "largest micro-batch that fits") where
/// every larger size was tried, else `partial` with the next size not fitting and the untried
/// sizes named; then the smaller sizes checked that do not fit (`c`: what the search checked)
/// and `why` a smaller size can fail where a larger one fits.
pub(crate) fn search_line(
    full: &str,
    partial: &str,
    n: u64,
    c: Option<&SearchChecked>,
    why: &str,
) -> String {
    let head = match c.and_then(|c| c.untried_above_to) {
        Some(t) => format!(
            "{partial} that fits with the next not: {n} ({}–{t} not tried: a larger one may fit)",
            n + 2
        ),
        None => format!("{full}: {n}"),
    };
    let gap = gap(c, n, why);
    if gap.is_empty() {
        head
    } else {
        format!("{head} ({})", &gap[2..])
    }
}

/// Where a smaller size than the answer `n` does not fit, which, and `why` (`"; …"`; empty
/// where none).
fn gap(c: Option<&SearchChecked>, n: u64, why: &str) -> String {
    match c {
        Some(c) if !c.not_fitting_below.is_empty() => {
            let ranges: Vec<String> = c
                .not_fitting_below
                .iter()
                .map(|&[a, b]| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}–{b}")
                    }
                })
                .collect();
            let checked = if c.checked_below_from <= 1 {
                "every smaller one checked".to_string()
            } else {
                format!("of {}–{} checked", c.checked_below_from, n - 1)
            };
            format!(
                "; {} do{} not fit, {checked}: {why}",
                ranges.join(", "),
                if ranges.len() == 1 && c.not_fitting_below[0][0] == c.not_fitting_below[0][1] {
                    "es"
                } else {
                    ""
                }
            )
        }
        _ => String::new(),
    }
}

/// Why a training or `generate` step's fit is not monotone in its size (see
/// `vram_model::walk::settled_largest`).
const RELEASE: &str =
    "where the device first runs out decides which cached segments the allocator releases whole";

impl EstimateReport {
    /// The verdict line.
    pub fn verdict(&self) -> String {
        verdict(&self.gpu, self.total_bytes)
    }

    /// The lines of the fit searches: the largest micro-batch (training), or the largest batch
    /// and the longest context (inference).
    pub fn fit_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.setup.mode {
            Mode::Train(_) => match self.max_micro_batch.flatten() {
                Some(b) => out.push(search_line(
                    "largest micro-batch that fits",
                    "micro-batch",
                    b,
                    self.batch_search.as_ref(),
                    RELEASE,
                )),
                None => out.push("no micro-batch fits".into()),
            },
            Mode::Infer(i) => match self.max_batch.flatten() {
                Some(b) => {
                    out.push(search_line(
                        &format!("largest batch at context {}", i.context),
                        &format!("batch at context {}", i.context),
                        b,
                        self.batch_search.as_ref(),
                        RELEASE,
                    ));
                    if let Some(n) = self.max_context.flatten() {
                        let c = self.context_search.as_ref();
                        let limit = self.max_context_limit.as_ref();
                        match limit.filter(|l| l.tokens == n) {
                            Some(l) => out.push(format!(
                                "longest context at batch {}: {n} (where the search stops: {}; a longer one would fit{})",
                                i.batch, l.source, gap(c, n, RELEASE)
                            )),
                            None => out.push(search_line(
                                &format!("longest context at batch {}", i.batch),
                                &format!("context at batch {}", i.batch),
                                n,
                                c,
                                RELEASE,
                            )),
                        }
                    }
                }
                None => out.push("not even batch 1 fits".into()),
            },
        }
        out
    }

    /// The "would fit with" lines (none when the step fits).
    pub fn suggestion_lines(&self) -> Vec<String> {
        let Some(s) = &self.suggestions else {
            return Vec::new();
        };
        if s.is_empty() {
            return vec![tried_line(&vram_plan::suggest::step_tried(&self.setup))];
        }
        s.iter()
            .map(|s| {
                format!(
                    "would fit with {}: {} on the device",
                    s.label(),
                    bytes(s.total_bytes)
                )
            })
            .collect()
    }

    /// Which `generate` call the reserved peak is, for the line that prints it: a first call
    /// (the default, as a user's script makes it), or the call after `--warmup-prompt`'s
    /// warm-up and peak reset (as a benchmark measures); empty for a training step.
    pub fn generate_call(&self) -> &'static str {
        match (self.setup.mode, self.setup.overheads.warmup_prompt) {
            (Mode::Infer(_), None) => "of a first generate call",
            (Mode::Infer(_), Some(_)) => "of the generate call after the warm-up",
            _ => "",
        }
    }

    /// The `assumed:` line: overheads and how the reserved bytes were found.
    pub fn assumed_line(&self) -> String {
        let o = self.setup.overheads;
        let reserved = match o.fragmentation {
            Some(f) => format!(
                "allocator overhead {:.0}% of peak (--fragmentation)",
                f * 100.0
            ),
            None if !self.reserved_replayed => format!(
                "reserved and needed are the walked peak of the tensors' own bytes, a lower bound: the {} allocator replay could not place the step (a tensor past the {} it places in one block, or more than the 1 PiB device it replays on)",
                o.allocator.name(),
                bytes(vram_alloc::MAX_REQUEST)
            ),
            None => format!(
                "reserved from a replay of the step through the {} allocator (--allocator){}",
                o.allocator.name(),
                match self.decode_sampled.flatten() {
                    Some(d) => format!(
                        ", {} of the {} decode steps (--decode-replay)",
                        thousands(d.replayed),
                        thousands(d.steps)
                    ),
                    None => String::new(),
                }
            ) + &match (self.setup.mode, o.warmup_prompt) {
                (Mode::Infer(i), Some(n)) => format!(
                    ", the generate call after a warm-up call on {} prompt tokens and a peak reset (--warmup-prompt)",
                    thousands(n.min(i.prompt()))
                ),
                (Mode::Infer(_), None) => {
                    ", a first generate call (--warmup-prompt)".to_string()
                }
                _ => String::new(),
            },
        };
        format!(
            "assumed: CUDA context {} (--cuda-context; {}), library workspace {} (--workspace), {reserved}",
            bytes(o.cuda_context_bytes),
            self.cuda_context_source,
            bytes(o.workspace_bytes),
        )
    }

    /// What the estimate says of the stored weights, the cache, the images and the checkpoint,
    /// after the speed line.
    pub fn detail_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(p) = &self.packed_weights {
            lines.push(format!(
                "weights as stored in {}: {} (packed weights with their scales/zeros/absmax; embedding, head and norms in {}); loaded in place, no fp32 build",
                p.format,
                bytes(p.bytes),
                p.unquantized_dtype
            ));
        }
        if let Some(s) = &self.weights_storage {
            let how = match &s.quant {
                StorageQuant::None | StorageQuant::Other => s.dtype.clone(),
                StorageQuant::Fp8Block { bn, bk, e8m0, .. } => {
                    format!("fp8 {bn}x{bk} blocks + {} scales", scale_name(*e8m0))
                }
                StorageQuant::Mxfp4 => "mxfp4 experts".into(),
                StorageQuant::Packed {
                    format,
                    double_quant,
                } => {
                    if *double_quant {
                        format!("{format} linears, double quant")
                    } else {
                        format!("{format} linears")
                    }
                }
            };
            let how = if self.weights_dequantized {
                format!("{how}, dequantized")
            } else {
                how
            };
            if self.packed_weights.is_none() && self.weights_load.is_none() {
                // With `--weights`, the packed form's line above says what is stored.
                lines.push(format!(
                    "weights as stored: {} ({how})",
                    bytes(self.weights_bytes)
                ));
            }
        }
        if let Some(l) = &self.weights_load {
            let how = match self.weights_storage.as_ref().map(|s| &s.quant) {
                Some(StorageQuant::Fp8Block { bn, bk, e8m0, .. }) => {
                    format!("fp8 {bn}x{bk} blocks + {} scales", scale_name(*e8m0))
                }
                Some(StorageQuant::Mxfp4) => "mxfp4 experts".into(),
                Some(StorageQuant::Packed { format, .. }) => format!("{format} linears"),
                _ => "packed".into(),
            };
            lines.push(if l.dequantized {
                format!(
                    "weights held dequantized: {}, {}; as stored ({how}) they take {}",
                    bytes(l.held_bytes),
                    l.why,
                    bytes(l.stored_bytes)
                )
            } else if let Some(part) = &l.not_loaded {
                format!(
                    "weights held: {}, {}: {part} held as built in the dtype, not loaded from the checkpoint; the other quantized linears stay packed; as stored ({how}) they take {}, all dequantized {}",
                    bytes(l.held_bytes),
                    l.why,
                    bytes(l.stored_bytes),
                    bytes(l.dequantized_bytes)
                )
            } else if let Some(part) = &l.dequantized_at_load {
                let rest = if l.held_bytes == l.dequantized_bytes {
                    "nothing else is quantized, so no weight stays packed".to_string()
                } else {
                    "the other quantized linears stay packed".to_string()
                };
                format!(
                    "weights held: {}, {}: {part} dequantized, {rest}; as stored ({how}) they take {}, all dequantized {}",
                    bytes(l.held_bytes),
                    l.why,
                    bytes(l.stored_bytes),
                    bytes(l.dequantized_bytes)
                )
            } else {
                format!(
                    "weights held as stored: {} ({how}), {}; dequantized they would take {}",
                    bytes(l.held_bytes),
                    l.why,
                    bytes(l.dequantized_bytes)
                )
            });
        }
        if let Some(k) = &self.kernels {
            if self.weights_load.is_some() || k.packages != "none" {
                lines.push(format!("kernels assumed: {} ({})", k.packages, k.source));
            }
        }
        if let (Some(after), Some(per)) =
            (self.cache_after_prefill_bytes, self.cache_bytes_per_token)
        {
            lines.push(if per < 0 {
                // DynamicSlidingWindowLayer keeps a slice of the prefill's whole K/V tensor, so
                // the prompt beyond the window is freed only by the first decode step's `cat`.
                format!(
                    "cache after the prefill: {}; the first decode step frees a net {} (sliding layers \
                     keep the prefill's whole keys and values until then, their window after)",
                    bytes(after),
                    bytes(per.unsigned_abs())
                )
            } else {
                format!(
                    "cache after the prefill: {}; one decode step adds {}",
                    bytes(after),
                    bytes(per.unsigned_abs())
                )
            });
        }
        if let Some(i) = &self.image_tokens {
            let tiles = if i.tiles_per_image > 1 {
                format!(" in {} tiles", i.tiles_per_image)
            } else {
                String::new()
            };
            lines.push(format!(
                "images: {} per sequence at {}x{} (resized to {}x{}{tiles}): {} patches each through the vision tower, {} image tokens each ({} positions with their markers), {} positions per sequence",
                i.images_per_sequence, i.width, i.height, i.resized.width, i.resized.height,
                i.patches_per_image, i.per_image, i.sequence_per_image, i.sequence_total
            ));
        }
        if let Some(c) = self.checkpoint_params {
            let verdict = if c == self.params {
                "matches the config".to_string()
            } else {
                format!("config says {}", thousands(self.params))
            };
            lines.push(format!(
                "{}: {} parameters ({verdict})",
                self.checkpoint_place
                    .as_deref()
                    .unwrap_or("checkpoint beside the config"),
                thousands(c)
            ));
        }
        lines
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = self.write_text(&mut o);
        o
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "{} — {} parameters",
            self.model,
            thousands(self.params)
        )?;
        writeln!(out, "{}", self.description)?;
        if self.setup.parallel.pp > 1 {
            writeln!(
                out,
                "pipeline rank {} needs the most; figures are per GPU",
                self.pipeline_rank
            )?;
        }
        writeln!(out)?;
        writeln!(out, "{:<22} {:>12} {:>7}", "category", "bytes", "share")?;
        for (c, b) in self.breakdown.iter() {
            let share = 100.0 * b as f64 / self.total_bytes as f64;
            writeln!(out, "{:<22} {:>12} {:>6.1}%", c, bytes(b), share)?;
        }
        writeln!(out, "{:-<43}", "")?;
        writeln!(
            out,
            "{:<22} {:>12}   at {}",
            "peak allocated",
            bytes(self.peak_bytes),
            self.peak_phase
        )?;
        let cached = self.needed_bytes < self.reserved_bytes;
        let said: Vec<&str> = [
            self.generate_call(),
            if cached {
                "on a GPU with room to cache every segment"
            } else {
                ""
            },
        ]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
        writeln!(
            out,
            "{:<22} {:>12}   (max_memory_reserved{}{})",
            "peak reserved",
            bytes(self.reserved_bytes),
            if said.is_empty() { "" } else { " " },
            said.join(", ")
        )?;
        needed_and_total(out, cached, self.needed_bytes, self.total_bytes)?;
        writeln!(out)?;
        writeln!(out, "{}", self.verdict())?;
        for l in self.fit_lines() {
            writeln!(out, "{l}")?;
        }
        for l in self.suggestion_lines() {
            writeln!(out, "{l}")?;
        }
        writeln!(out, "{}", self.assumed_line())?;
        writeln!(out, "models: {}", self.assumes.line())?;
        for m in &self.mechanisms {
            writeln!(out, "mechanism: {m}")?;
        }
        if let Some(tl) = &self.timeline {
            writeln!(out)?;
            writeln!(
                out,
                "{:<40} {:>12} {:>12}",
                "timeline (phase)", "at entry", "high in it"
            )?;
            for p in tl {
                writeln!(
                    out,
                    "{:<40} {:>12} {:>12}",
                    p.label,
                    bytes(p.live_bytes),
                    bytes(p.high_bytes)
                )?;
            }
        }
        if let Some(s) = &self.serving {
            writeln!(out, "{}", speed_line(s))?;
        }
        for l in self.detail_lines() {
            writeln!(out, "{l}")?;
        }
        crate::notes::write(out, &self.notes)
    }
}

impl WeightsReport {
    /// The first line: the parameters and the weights' bytes.
    pub fn title(&self) -> String {
        format!(
            "{} — {} parameters, {} of weights",
            self.model,
            thousands(self.params),
            bytes(self.weights_bytes)
        )
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut o = format!("{}\n", self.title());
        for (d, n) in self.dtypes.iter() {
            o += &format!("  {d:<6} {}\n", thousands(n));
        }
        o += "(parameters only: give the folder with config.json to estimate a step)\n";
        o
    }
}

/// The "needed" and "device total" lines under a peak: with idle cached segments at the peak
/// (`cached`), the smallest device the step runs on and that plus the context; otherwise the
/// total alone. `vram estimate`'s and the LoRA/QLoRA step's text share them.
pub(crate) fn needed_and_total(
    out: &mut String,
    cached: bool,
    needed: u64,
    total: u64,
) -> std::fmt::Result {
    if cached {
        // Segments cached but idle at the peak: PyTorch gives them back when cudaMalloc
        // fails.
        writeln!(
            out,
            "{:<22} {:>12}   (on the smallest device that runs it: idle cached segments released, cudaMalloc retried)",
            "needed",
            bytes(needed)
        )?;
        writeln!(
            out,
            "{:<22} {:>12}   (needed plus CUDA context)",
            "device total",
            bytes(total)
        )
    } else {
        writeln!(
            out,
            "{:<22} {:>12}   (what nvidia-smi shows)",
            "device total",
            bytes(total)
        )
    }
}

/// How block-FP8 scales are held: fp32, or a byte each (`scale_fmt: ue8m0`).
fn scale_name(e8m0: bool) -> &'static str {
    if e8m0 {
        "e8m0"
    } else {
        "fp32"
    }
}
