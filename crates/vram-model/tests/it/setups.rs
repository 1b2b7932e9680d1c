//! Setups several integration tests build.

use vram_model::finetune::step::{FinetuneSpec, Method};
use vram_model::finetune::{LoraSpec, Targets, WeightFormat};
use vram_model::setup::{Infer, KvCache, Mode, Precision, Setup};

/// A bf16 `generate` call of `batch` prompts of `prompt` tokens and `new` new tokens, with a
/// dynamic bf16 cache (`from_pretrained` and `generate`'s defaults).
pub fn generate(batch: u64, prompt: u64, new: u64) -> Setup {
    Setup {
        precision: Precision::Bf16,
        mode: Mode::Infer(Infer {
            batch,
            context: prompt + new,
            new_tokens: new,
            kv_bytes: 2,
            kv_cache: KvCache::Dynamic,
        }),
        ..Setup::default()
    }
}

/// A LoRA/QLoRA step as `vram estimate --finetune` builds it by default (PEFT's r 16, alpha
/// 32, all-linear; TRL's gradient checkpointing).
pub fn finetune(method: Method, weights: WeightFormat) -> FinetuneSpec {
    FinetuneSpec {
        method,
        weights,
        double_quant: false,
        lora: LoraSpec {
            rank: 16,
            alpha: 32,
            dropout: 0.0,
            targets: Targets::AllLinear,
        },
        skip_modules: Vec::new(),
        prepare_kbit: false,
        load_fp32: false,
        gradient_checkpointing: true,
    }
}
