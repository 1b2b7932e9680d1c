//! `vram estimate --finetune lora|qlora`: one LoRA/QLoRA step.

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::finetune::step::{self, FinetuneSpec, Method};
use vram_model::fmt::{bytes, thousands};
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Setup};
use vram_plan::suggest::{self, Suggestion};

use crate::check::{Checker, Range, Ranges, Totals, AT_LEAST_1};
use crate::error::Result;
use crate::estimate::SearchChecked;
use crate::parts::{double_option, Bytes, GpuRef};
use crate::text::{needed_and_total, verdict};
use crate::{Kind, SCHEMA_VERSION};

/// One LoRA/QLoRA training step (PEFT 0.21.2, bitsandbytes 0.50.2, TRL 1.16.0's `SFTTrainer`):
/// where its memory goes, whether it fits, the largest micro-batch that fits, and what would
/// make it fit. `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinetuneReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `finetune`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// Parameters of the unquantized model.
    pub params: u64,
    /// `lora` or `qlora`.
    pub finetune: String,
    /// The setup line the text prints second.
    pub description: String,
    /// The base's storage.
    pub weights: BaseWeights,
    /// bitsandbytes 4-bit double quantization.
    pub double_quant: bool,
    /// The adapters.
    pub lora: Lora,
    /// The adapters' parameters.
    pub trainable_params: u64,
    /// The base's bytes as held (as `weights.total_bytes`).
    pub weights_bytes: u64,
    /// Bytes per adapter element.
    pub adapter_dtype_bytes: u64,
    /// What the first layer, frozen, does not save that full training saves (per micro-batch).
    pub frozen_layer_discount_bytes: u64,
    /// What autograd saves for each adapter of the first layer (per micro-batch).
    pub adapter_saved_bytes: Vec<SavedBytes>,
    /// Peak of live tensor bytes.
    pub peak_tensor_bytes: u64,
    /// Peak allocated (allocator blocks).
    pub peak_bytes: u64,
    /// Peak reserved (`max_memory_reserved`) on a GPU with room to cache every segment.
    pub reserved_bytes: u64,
    /// The smallest device (less the CUDA context) the step runs on: PyTorch releases idle
    /// cached segments and retries a failing `cudaMalloc`.
    pub needed_bytes: u64,
    /// Needed plus the CUDA context.
    pub total_bytes: u64,
    /// Bytes per category at the peak.
    pub breakdown: Bytes,
    /// Where the peak happens.
    pub peak_phase: String,
    /// The GPU.
    pub gpu: GpuRef,
    /// The GPU's memory.
    pub gpu_memory_bytes: u64,
    /// Whether it fits.
    pub fits: bool,
    /// GPU memory less `total_bytes`.
    pub headroom_bytes: i64,
    /// The micro-batch search's answer (null: not even 1 fits): it fits and the next size does
    /// not; it is the largest that fits where `batch_search` has no `untried_above_to`.
    #[serde(default, with = "double_option")]
    pub max_micro_batch: Option<Option<u64>>,
    /// What the micro-batch search checked besides its answer (absent where none fits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_search: Option<SearchChecked>,
    /// When it does not fit: the changes that make it fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestions: Option<Vec<Suggestion>>,
    /// Gradient checkpointing.
    pub gradient_checkpointing: bool,
    /// `prepare_model_for_kbit_training` called.
    pub prepare_kbit: bool,
    /// What the libraries do that a user would not expect.
    pub notes: Vec<String>,
    /// The library code the estimate follows.
    pub assumes: Vec<String>,
    /// The setup.
    pub setup: Setup,
}

impl Ranges for FinetuneReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.field("gpu", &self.gpu)?;
        // The micro-batch search's answer fits: at least 1 (null where none does).
        if let Some(n) = self.max_micro_batch.flatten() {
            c.at_least_1("max_micro_batch", n)?;
        }
        c.at("lora", |c| {
            c.num("dropout", self.lora.dropout, Range::FRACTION)?;
            // PEFT's `LoraConfig` refuses a rank below 1 ("`r` should be a positive integer").
            c.int("rank", self.lora.rank, AT_LEAST_1)?;
            c.each("adapted_modules", &self.lora.adapted_modules, |c, a| {
                c.int("rank", a.rank, AT_LEAST_1)
            })
        })?;
        c.field("setup", &self.setup)?;
        Totals {
            breakdown: &self.breakdown,
            peak_tensor_bytes: self.peak_tensor_bytes,
            peak_bytes: self.peak_bytes,
            reserved_bytes: self.reserved_bytes,
            needed_bytes: self.needed_bytes,
            total_bytes: self.total_bytes,
            cuda_context_bytes: self.setup.overheads.cuda_context_bytes,
            gpu: &self.gpu,
            gpu_memory_bytes: self.gpu_memory_bytes,
            fits: self.fits,
            headroom_bytes: self.headroom_bytes,
        }
        .ranges(c)
    }
}

/// The base's storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseWeights {
    /// Every byte of the base as the library holds it (packed linears with their quantization
    /// state; what transformers 5.24 dequantizes at load, such as compressed-tensors W4A16 expert
    /// banks, in the dtype).
    pub total_bytes: u64,
    /// Of which packed linears with their quantization state.
    pub quantized_bytes: u64,
    /// Of which in the load dtype.
    pub unquantized_bytes: u64,
    /// `--weights`.
    pub format: String,
}

/// The adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lora {
    /// `r`.
    pub rank: u64,
    /// `lora_alpha`.
    pub alpha: u64,
    /// `lora_dropout`.
    pub dropout: f64,
    /// `target_modules` as given.
    pub targets: String,
    /// PEFT's `target_parameters` after its MoE rewrite.
    pub target_parameters: Vec<String>,
    /// Every adapted module.
    pub adapted_modules: Vec<Adapted>,
}

/// One adapted module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adapted {
    /// Its path in the layer.
    pub path: String,
    /// Its rank.
    pub rank: u64,
    /// Layers that carry it.
    pub layers: u64,
    /// Adapter parameters over those layers.
    pub params: u64,
}

/// Saved bytes of one adapted module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedBytes {
    /// Its path.
    pub path: String,
    /// Bytes per micro-batch.
    pub bytes: u64,
}

/// The report of `spec` on `setup` (a training step) on `gpu`.
pub fn build(
    model: &Model,
    setup: &Setup,
    spec: &FinetuneSpec,
    gpu: &Gpu,
) -> Result<FinetuneReport> {
    let e = step::estimate(model, setup, spec)?;
    let cap = gpu.memory_bytes;
    let fits = e.fits(cap);
    let search = step::largest_micro_batch(model, setup, spec, cap)?;
    let description = match setup.mode {
        Mode::Train(t) => format!(
            "{}: base {}{} ({} held), adapters r={} on {} in {}, micro-batch {} x seq {}, grad-accum {}, gradient checkpointing {}",
            spec.method.name(),
            spec.weights.name(),
            if spec.double_quant { " double-quant" } else { "" },
            bytes(e.weights.total),
            spec.lora.rank,
            spec.lora.targets.display(),
            if e.adapter_bytes == 4 { "fp32" } else { "bf16" },
            t.micro_batch,
            t.seq,
            t.grad_accum,
            if spec.gradient_checkpointing { "on" } else { "off" },
        ),
        Mode::Infer(_) => String::new(),
    };
    Ok(FinetuneReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Finetune,
        model: e.model.clone(),
        params: e.params,
        finetune: spec.method.name().into(),
        description,
        weights: BaseWeights {
            total_bytes: e.weights.total,
            quantized_bytes: e.weights.quantized,
            unquantized_bytes: e.weights.unquantized,
            format: spec.weights.name(),
        },
        double_quant: spec.double_quant,
        lora: Lora {
            rank: spec.lora.rank,
            alpha: spec.lora.alpha,
            dropout: spec.lora.dropout,
            targets: spec.lora.targets.display(),
            target_parameters: e.plan.target_parameters.clone(),
            adapted_modules: e
                .plan
                .adapted
                .iter()
                .map(|a| Adapted {
                    path: a.site.path.clone(),
                    rank: a.rank,
                    layers: a.count,
                    params: a.params(),
                })
                .collect(),
        },
        trainable_params: e.trainable_params,
        weights_bytes: e.weights.total,
        adapter_dtype_bytes: e.adapter_bytes,
        frozen_layer_discount_bytes: e.frozen_layer_discount,
        adapter_saved_bytes: e
            .adapter_saved
            .iter()
            .map(|(p, b)| SavedBytes {
                path: p.clone(),
                bytes: *b,
            })
            .collect(),
        peak_tensor_bytes: e.peak_tensor_bytes,
        peak_bytes: e.peak_bytes,
        reserved_bytes: e.reserved_bytes,
        needed_bytes: e.needed_bytes,
        total_bytes: e.total_bytes,
        breakdown: (&e.breakdown).into(),
        peak_phase: e.peak_phase.clone(),
        gpu: gpu.into(),
        gpu_memory_bytes: cap,
        fits,
        headroom_bytes: cap as i64 - e.total_bytes as i64,
        max_micro_batch: Some(search.as_ref().map(|l| l.value)),
        batch_search: search.as_ref().map(SearchChecked::from),
        suggestions: (!fits).then(|| suggest::finetune(model, setup, spec, cap)),
        gradient_checkpointing: spec.gradient_checkpointing,
        prepare_kbit: spec.prepare_kbit,
        notes: e.notes.clone(),
        assumes: e.assumes.iter().map(|s| s.to_string()).collect(),
        setup: *setup,
    })
}

/// Why a smaller micro-batch can fail where a larger one fits: PyTorch's allocator places each
/// tensor in the smallest cached block that holds it and splits the block where more than
/// 1 MiB would remain, so where the tensors of one step land depends on every earlier size; a
/// smaller micro-batch can leave no free block as large as one of the backward's transients
/// where a larger one does, and that transient gets a new segment that releasing idle cached
/// segments does not offset (BENCHMARKS.md: "Why the memory a LoRA step needs is not monotone
/// in its micro-batch"; `vram_model::finetune::step::largest_micro_batch`).
const WHY: &str = "PyTorch's allocator places each tensor in the smallest cached block that holds it and splits it, so a smaller micro-batch can leave no free block for a backward transient where a larger one does: the memory a step needs is not monotone in the micro-batch";

/// The `models:` line of a LoRA/QLoRA estimate.
pub const MODELS_LINE: &str = "models: PEFT 0.21.2, bitsandbytes 0.50.2, transformers 5.24, TRL 1.16.0 SFTTrainer defaults (--json assumes names each function)";

impl FinetuneReport {
    /// The verdict line.
    pub fn verdict(&self) -> String {
        verdict(&self.gpu, self.total_bytes)
    }

    /// The line of the micro-batch search.
    pub fn fit_lines(&self) -> Vec<String> {
        vec![match self.max_micro_batch.flatten() {
            Some(b) => crate::text::search_line(
                "largest micro-batch that fits",
                "micro-batch",
                b,
                self.batch_search.as_ref(),
                WHY,
            ),
            None => "no micro-batch fits".into(),
        }]
    }

    /// The "would fit with" lines (none when the step fits).
    pub fn suggestion_lines(&self) -> Vec<String> {
        let Some(s) = &self.suggestions else {
            return Vec::new();
        };
        if s.is_empty() {
            let method = Method::parse(&self.finetune).unwrap_or(Method::Lora);
            return vec![crate::text::tried_line(&suggest::finetune_tried(
                self.gradient_checkpointing,
                method,
                self.lora.rank,
            ))];
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

    /// The first line.
    pub fn title(&self) -> String {
        format!(
            "{} — {} parameters, {} trainable ({:.3}%)",
            self.model,
            thousands(self.params),
            thousands(self.trainable_params),
            100.0 * self.trainable_params as f64 / self.params.max(1) as f64
        )
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = self.write_text(&mut out);
        out
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "{}", self.title())?;
        writeln!(out, "{}", self.description)?;
        writeln!(out)?;
        writeln!(out, "{:<22} {:>12} {:>7}", "category", "bytes", "share")?;
        for (c, b) in self.breakdown.iter() {
            writeln!(
                out,
                "{:<22} {:>12} {:>6.1}%",
                c,
                bytes(b),
                100.0 * b as f64 / self.total_bytes as f64
            )?;
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
        writeln!(
            out,
            "{:<22} {:>12}   (max_memory_reserved{})",
            "peak reserved",
            bytes(self.reserved_bytes),
            if cached {
                " on a GPU with room to cache every segment"
            } else {
                ""
            }
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
        crate::notes::write(out, &self.notes)?;
        writeln!(out, "{MODELS_LINE}")?;
        Ok(())
    }
}
