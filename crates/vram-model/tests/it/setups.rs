//! Setups several integration tests build.

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
