//! Serving capacity before launch: what vLLM or SGLang would log at start-up for a model on a
//! GPU — weights per GPU, memory outside PyTorch, the profiling run's activation peak, CUDA
//! graphs, the KV cache in bytes and tokens, the concurrency at `max_model_len` — and whether
//! it starts.
//!
//! Each engine's rule is read from its source at a pinned version:
//!
//! - **vLLM 0.11 (V1 engine)**, `vllm/v1/worker/gpu_worker.py` `Worker.determine_available_memory`:
//!   `available = total × gpu_memory_utilization − (weights + torch peak increase of the profile
//!   run + non-torch increase)`, measured from a snapshot taken after the CUDA context exists
//!   (so the context is outside the budget's terms but inside `total`). CUDA graphs are
//!   captured after the KV cache is allocated (`compile_or_warm_up_model`) and so are not
//!   subtracted: they come on top of the budget. The KV cache's layout per layer kind (full,
//!   sliding, MLA latent, Mamba2 / Gated DeltaNet state, hybrid models' shared pages) is
//!   `vllm_layout` (`vllm/v1/kv_cache_interface.py` page sizes, `vllm/v1/core/kv_cache_utils.py`
//!   grouping, `vllm/model_executor/models/config.py` hybrid block alignment; reported as
//!   [`Capacity::kv_groups`]): `num_blocks = available // page // layers per group`, the
//!   logged token count is `num_blocks // groups × smallest block size`, and the concurrency at
//!   `max_model_len` is `num_blocks` over the blocks one request needs in every group (full
//!   and MLA `⌈max_model_len / block⌉`, sliding `⌈min(window − 1 + max_num_batched_tokens,
//!   max_model_len) / block⌉ + 1`, a state one). `check_enough_kv_cache_memory` refuses to
//!   start when one request of `max_model_len` does not fit (every layer's blocks times the
//!   page), and names the largest length that would.
//!   `vllm/engine/arg_utils.py` `_set_default_args`: `vllm serve` defaults to
//!   `max_num_batched_tokens` 8192 and `max_num_seqs` 1024 on GPUs of at least 70 GiB other than
//!   the A100, else 2048 and 256. The profile run (`GPUModelRunner.profile_run`) is a forward of
//!   `max_num_batched_tokens` tokens and a sampler run over `min(max_num_seqs, tokens)` logits.
//!   From 0.19 (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` on by default) the CUDA graphs'
//!   estimated memory is subtracted before the KV cache is sized.
//! - **vLLM V0** (0.5–0.7, `worker.py` `determine_num_available_blocks`): the same budget less
//!   the profile's peak and the memory outside PyTorch; the profile run is one batch of
//!   `max(max_model_len, 2048)` tokens (no chunked prefill up to 32K) over `max_num_seqs` = 256
//!   sequences, sampled with top-k and top-p; the logged concurrency is tokens over
//!   `max_model_len`.
//! - **SGLang 0.5** (`python/sglang/srt/server_args.py` `_handle_gpu_memory_settings`,
//!   `model_executor/model_runner.py` `profile_max_num_token`): `chunked_prefill_size` and
//!   `cuda_graph_max_bs` from the GPU's memory bucket (< 20, 35, 60, 90, 160 GiB),
//!   `mem_fraction_static = (gpu_mem − reserved) / gpu_mem` with `reserved = 512 +
//!   max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp / 8 × 1024` MiB (at
//!   least 10 GiB above 60 GiB), then `rest = free after loading − free before loading × (1 −
//!   mem_fraction_static)` and `max_total_num_tokens = rest // cell_size`, `cell_size = kv_heads
//!   × (head_dim + v_head_dim) × layers × dtype` (MLA: `(kv_lora_rank + qk_rope_head_dim) ×
//!   layers × dtype`); zero or less is "Not enough memory. Please try to increase
//!   --mem-fraction-static." A Mamba2 / Gated DeltaNet model's states take `rest × 0.9 / 1.9`
//!   first (`MambaPool`, `--mamba-full-memory-ratio`, [`KvGroup::state_slots`]); a model with
//!   sliding layers shares the all-full token count out with `swa = 0.8 × full` (`SWAKVPool`,
//!   `set_num_token_hybrid`).
//! - **SGLang 0.4** (`ServerArgs.__post_init__`): `mem_fraction_static` 0.88/0.87/0.85/0.81/0.79
//!   by TP size (1, 2, 4, 8, 16), chunked prefill 2048 and CUDA graphs up to 8 (TP < 4) or 80
//!   below 25,000 MiB, else 8192 and 160; `profile_max_num_token` as in 0.5.
//!
//! The profile run's peak is computed from the live set the engines' modules hold (see
//! `forward_peak` and `sampler_peak`), for the Llama-style decoder layer whatever the model.
//! What is estimated rather than read: CUDA-graph memory, the memory outside PyTorch, and
//! SGLang's distributed-init memory on GPUs other than the one measured (each named in
//! [`Capacity::assumes`]). Checked against eleven real logs by `crates/vram-cli/tests/capacity.rs`.

use serde::Serialize;
use vram_model::arch::{Mlp, Transformer};
use vram_model::fmt::thousands;
use vram_model::gpu::Gpu;

use crate::error::{Error, Result};

mod engine;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: u64 = 1 << 20;

/// What SGLang's `init_torch_distributed` leaves allocated per GPU at TP > 1: its own log line
/// "Init torch distributed ends. mem usage=0.13 GB" (GiB; 4 × L4, TP 4, NCCL 2.21.5, custom
/// all-reduce off on PCIe; didier-durand/llms-in-clouds docs/sglang.md). One measurement, used for
/// every GPU (estimated elsewhere).
const SGLANG_DISTRIBUTED_INIT_BYTES: u64 = 133 * MIB;

/// SGLang's `--swa-full-tokens-ratio` default (`server_args.py`): a sliding-window layer's
/// tokens against a full layer's.
const SGLANG_SWA_FULL_TOKENS_RATIO: f64 = 0.8;

/// SGLang's `--mamba-full-memory-ratio` default (`server_args.py`): the Mamba state pool's share
/// of the KV memory against the token pool's.
const SGLANG_MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;

/// The serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// vLLM (V1 engine).
    Vllm,
    /// SGLang.
    Sglang,
}

impl Engine {
    /// `vllm` or `sglang`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }
    /// The version whose source the rules were read from.
    pub fn pinned_version(self) -> &'static str {
        match self {
            Engine::Vllm => "0.11",
            Engine::Sglang => "0.5",
        }
    }
    /// Versions whose rules are modelled (`--engine-version`; a patch release such as `0.6.5`
    /// takes its minor version's rules and the patch-level changes named in [`Knobs::engine_version`]).
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &[
                "0.5", "0.6", "0.7", "0.8", "0.9", "0.10", "0.11", "0.12", "0.13", "0.14", "0.15",
                "0.16", "0.17", "0.18", "0.19", "0.20",
            ],
            Engine::Sglang => &["0.4", "0.5"],
        }
    }
}

/// `major.minor[.patch]` as numbers (`0.6.5` → `[0, 6, 5]`); `None` if it is not of that form.
pub fn parse_version(v: &str) -> Option<[u32; 3]> {
    let mut out = [0u32; 3];
    let mut n = 0;
    // "0.6.4", "v0.11", "0.4.3.post4", "0.6.4post1": the leading numbers, at most three.
    for p in v.trim_start_matches('v').split('.').take(3) {
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(x) = digits.parse() else { break };
        out[n] = x;
        n += 1;
        if digits.len() < p.len() {
            break;
        }
    }
    (n >= 2).then_some(out)
}

impl Engine {
    /// The version in force: the asked one, or the pinned one.
    fn version_in_force(self, k: &Knobs) -> [u32; 3] {
        k.engine_version
            .or_else(|| parse_version(self.pinned_version()))
            .unwrap_or([0, 0, 0])
    }
}

/// What one layer keeps per token (or per request) in the serving engine's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerCache {
    /// Full attention: keys and values of every token.
    Full {
        /// Key/value heads (before tensor parallelism).
        kv_heads: u64,
        /// Key width per head.
        head_dim: u64,
        /// Value width per head.
        v_head_dim: u64,
    },
    /// Sliding-window (or chunked) attention: the last `window` tokens.
    Sliding {
        /// Key/value heads.
        kv_heads: u64,
        /// Width per head.
        head_dim: u64,
        /// Tokens attended to.
        window: u64,
    },
    /// MLA: one compressed latent and the rotary key per token, shared by all heads.
    MlaLatent {
        /// `kv_lora_rank`.
        kv_lora_rank: u64,
        /// `qk_rope_head_dim`.
        rope_dim: u64,
    },
    /// Mamba2 / Gated DeltaNet: a fixed state per request, a convolution state and a
    /// recurrent one, in the shapes vLLM's `MambaStateShapeCalculator`
    /// (`vllm/model_executor/layers/mamba/mamba_utils.py`) gives them.
    State {
        /// Convolution channels split evenly by TP (Gated DeltaNet: `2·k_heads·k_dim +
        /// v_heads·v_dim`; Mamba2: `heads·head_dim`, its B/C groups apart).
        conv_dim: u64,
        /// Mamba2's B/C groups (0 for Gated DeltaNet); at TP not dividing them vLLM replicates
        /// them to `tp` (`extra_groups_for_head_shards`).
        groups: u64,
        /// Convolution channels per group (Mamba2: `2·state_size`).
        group_dim: u64,
        /// Convolution width; the engines keep `conv_kernel − 1` columns.
        conv_kernel: u64,
        /// Recurrent-state heads, split by TP.
        heads: u64,
        /// Recurrent-state elements per head (`k_dim·v_dim`, or `head_dim·state_size`).
        head_state: u64,
    },
}

impl LayerCache {
    /// Elements of one request's convolution and recurrent states on one GPU of a `tp`-way job
    /// (vLLM's `mamba2_state_shape` / `gated_delta_net_state_shape`: conv `(conv_dim / tp,
    /// k − 1)`, temporal `(heads / tp, …)`); `(0, 0)` for attention layers.
    pub fn state_elements(&self, tp: u64) -> (u64, u64) {
        match *self {
            LayerCache::State {
                conv_dim,
                groups,
                group_dim,
                conv_kernel,
                heads,
                head_state,
            } => {
                // `extra_groups_for_head_shards`: `tp − groups` more when TP does not divide them.
                let groups = if groups > 0 && groups % tp != 0 {
                    groups + tp.saturating_sub(groups)
                } else {
                    groups
                };
                let conv = (conv_dim + groups * group_dim).div_ceil(tp);
                (
                    conv * conv_kernel.saturating_sub(1),
                    heads.div_ceil(tp) * head_state,
                )
            }
            _ => (0, 0),
        }
    }

    /// Bytes of one request's state on one GPU (`MambaSpec.page_size_bytes`): the convolution
    /// state in the model dtype (`--mamba-cache-dtype auto`), the recurrent one in
    /// [`Knobs::mamba_ssm_bytes`] or the model dtype.
    pub fn state_bytes(&self, k: &Knobs) -> u64 {
        let (conv, ssm) = self.state_elements(k.tp);
        conv * k.dtype_bytes + ssm * k.mamba_ssm_bytes.unwrap_or(k.dtype_bytes)
    }
}

/// Bytes of the recurrent-state dtype a model's `config.json` names (`mamba_ssm_dtype`, at the
/// top or in `text_config`: Qwen3.5 ships `float32`); `None` when it names none. vLLM copies it
/// into `mamba_ssm_cache_dtype` (`vllm/model_executor/models/config.py`
/// `Qwen3_5ForConditionalGenerationConfig`) before the hybrid page alignment.
pub fn config_mamba_ssm_bytes(config_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(config_json).ok()?;
    let d = v
        .get("mamba_ssm_dtype")
        .or_else(|| v.get("text_config")?.get("mamba_ssm_dtype"))?
        .as_str()?;
    match d {
        "float32" | "fp32" => Some(4),
        "bfloat16" | "float16" | "bf16" | "fp16" => Some(2),
        _ => None,
    }
}

/// The per-layer cache kinds of a transformer as the serving engines see them.
///
/// This is the one place the capacity model reads the model's layer structure, and it reads
/// the layer-by-layer description (`vram_model::blocks`): a full-attention layer caches its
/// keys and values; a sliding or chunked layer its window (vLLM and SGLang treat a window not
/// shorter than `max_model_len` as full); an MLA layer one latent and the rotary key per token
/// (DeepSeek sparse attention's indexer keys are counted at the KV dtype beside it, an upper
/// bound: vLLM keeps them in fp8 with a scale); a Gated DeltaNet or Mamba2 layer a fixed state
/// per request in the engine's shapes ([`LayerCache::state_elements`]); a layer whose keys and
/// values come from an earlier layer (Gemma 4's KV sharing), or without a mixer, nothing.
pub fn layer_caches(t: &Transformer) -> Vec<LayerCache> {
    use vram_model::blocks::{Mixer, Window};
    t.blocks
        .iter()
        .filter_map(|b| match b.mixer {
            Mixer::Attention(a) if a.kv_shared => None,
            Mixer::Attention(a) => Some(match a.window {
                Window::Full => LayerCache::Full {
                    kv_heads: a.kv_heads,
                    head_dim: a.head_dim,
                    v_head_dim: a.v_head_dim,
                },
                Window::Sliding(w) | Window::Chunked(w) => LayerCache::Sliding {
                    kv_heads: a.kv_heads,
                    head_dim: a.head_dim,
                    window: w,
                },
            }),
            Mixer::Mla(m) => Some(LayerCache::MlaLatent {
                kv_lora_rank: m.kv_lora_rank,
                rope_dim: m.qk_rope_head_dim + m.indexer.map_or(0, |ix| ix.head_dim),
            }),
            Mixer::GatedDeltaNet(g) => Some(LayerCache::State {
                conv_dim: 2 * g.num_k_heads * g.k_head_dim + g.num_v_heads * g.v_head_dim,
                groups: 0,
                group_dim: 0,
                conv_kernel: g.conv_kernel,
                heads: g.num_v_heads,
                head_state: g.k_head_dim * g.v_head_dim,
            }),
            Mixer::Mamba2(m) => Some(LayerCache::State {
                conv_dim: m.heads * m.head_dim,
                groups: m.groups,
                group_dim: 2 * m.state_size,
                conv_kernel: m.conv_kernel,
                heads: m.heads,
                head_state: m.head_dim * m.state_size,
            }),
            Mixer::None => None,
        })
        .collect()
}

/// One kind of layer in the engine's KV cache (`kv_groups` in `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvGroup {
    /// `full`, `sliding`, `mla` or `state` (Mamba2 / Gated DeltaNet).
    pub kind: &'static str,
    /// Layers of this kind on the most loaded GPU.
    pub layers: u64,
    /// vLLM KV-cache groups of this kind (`⌈layers / layers_per_group⌉`; SGLang: 1).
    pub groups: u64,
    /// Layers per group, padding included (vLLM: the same for every group).
    pub layers_per_group: u64,
    /// Tokens per block (`state`: vLLM's `max_model_len`, one block per request).
    pub block_size: u64,
    /// Bytes of one block of one layer as allocated (vLLM: the one page size of every group).
    pub page_bytes: u64,
    /// Bytes the layer's own spec needs per block before the page is unified or padded (a
    /// state's `MambaSpec` page; attention `block_size × bytes per token`).
    pub spec_page_bytes: u64,
    /// Sliding window in tokens.
    pub window: Option<u64>,
    /// Blocks one request of `max_model_len` tokens takes in each group of this kind.
    pub blocks_per_request: u64,
    /// SGLang's state pool: the requests its `MambaPool` holds (`max_mamba_cache_size`);
    /// `None` elsewhere (vLLM's states share the block pool).
    pub state_slots: Option<u64>,
}

/// vLLM V1's KV-cache layout of one GPU's layers: the groups, their one page size, the layers
/// per group.
struct VllmLayout {
    groups: Vec<KvGroup>,
    page: u64,
    layers_per_group: u64,
}

impl VllmLayout {
    /// Groups in all (`len(kv_cache_config.kv_cache_groups)`).
    fn group_count(&self) -> u64 {
        self.groups.iter().map(|g| g.groups).sum()
    }
    /// Smallest block size of the groups (`_report_kv_cache_config`'s `min_block_size`).
    fn min_block(&self) -> u64 {
        self.groups.iter().map(|g| g.block_size).min().unwrap_or(16)
    }

    /// The pool vLLM builds from `available` bytes: `num_blocks = available // page // layers
    /// per group` (`get_num_blocks`), the logged tokens `num_blocks // groups × min block size`
    /// (`_report_kv_cache_config`, to 0.20 at least; 0.24 logs `int(concurrency ×
    /// max_model_len)` instead), and the concurrency at `len`: `num_blocks` over the blocks one
    /// request takes in every group (`get_max_concurrency_for_kv_cache_config`).
    fn pool(&self, available: u64, len: u64, mnbt: u64) -> (u64, u64, f64) {
        let num_blocks = available
            .checked_div(self.page)
            .map_or(0, |b| b / self.layers_per_group.max(1));
        let tokens = num_blocks / self.group_count().max(1) * self.min_block();
        let need: u64 = self
            .groups
            .iter()
            .map(|g| g.groups * vllm_blocks(g, len, mnbt))
            .sum();
        let concurrency = if need > 0 {
            num_blocks as f64 / need as f64
        } else {
            0.0
        };
        (num_blocks, tokens, concurrency)
    }
}

/// Blocks one layer of spec `g` holds for a request of `len` tokens (`max_memory_usage_bytes`
/// over the page, `vllm/v1/kv_cache_interface.py`): full and MLA `⌈len / block⌉`; sliding
/// `⌈min(window − 1 + max_num_batched_tokens, len) / block⌉ + 1`; a state one block.
fn vllm_blocks(g: &KvGroup, len: u64, mnbt: u64) -> u64 {
    match (g.kind, g.window) {
        ("state", _) => 1,
        ("sliding", Some(w)) => (w.saturating_sub(1) + mnbt).min(len).div_ceil(g.block_size) + 1,
        _ => len.div_ceil(g.block_size),
    }
}

/// vLLM V1's KV-cache layout (the one place it is modelled), read from vLLM's source:
///
/// - Page of one block of one layer (`vllm/v1/kv_cache_interface.py`): attention
///   `block_size × 2 × kv_heads/tp × head_size × kv dtype` (`AttentionSpec.page_size_bytes`);
///   MLA `block_size × (kv_lora_rank + qk_rope_head_dim) × kv dtype`, one head, not split by TP
///   (`MLAAttentionSpec`); Mamba2 / Gated DeltaNet the request's state
///   (`MambaSpec.page_size_bytes`, the shapes of [`LayerCache::state_elements`] in the model
///   dtype, `--mamba-cache-dtype auto`).
/// - Block size: `--block-size` (16); MLA on Hopper 64 (FlashMLA) and on Blackwell 128
///   (CUTLASS MLA), set by `vllm/platforms/cuda.py` `check_and_update_config`. A model with
///   state layers (`vllm/model_executor/models/config.py`
///   `HybridAttentionMambaModelConfig.verify_and_update_config`) takes the attention block
///   `16 × ⌈state page / (16 × attention page of one token)⌉` unless `--block-size` is larger
///   ("Setting attention block size to N tokens"), and pads the state page to the attention
///   page ("Padding mamba page size by X%").
/// - Pages still unequal (`unify_kv_cache_spec_page_size`): a smaller page's block size grows
///   by the ratio.
/// - Groups (`vllm/v1/core/kv_cache_utils.py` `_get_kv_cache_groups_uniform_page_size`):
///   layers of one spec form a type; the layers per group are the smallest type's count (the
///   largest's when it is below 1.5 × the smallest); each type splits into
///   `⌈layers / per group⌉` groups, the last padded. One model of one spec is one group.
/// - A sliding window no shorter than `max_model_len` is full attention here.
fn vllm_layout(layers: &[LayerCache], k: &Knobs, gpu: &Gpu, max_len: u64, mnbt: u64) -> VllmLayout {
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    let tp = attention_tp(k);
    let mla_aligned = engine::vllm_mla_entry_aligned(k, engine::vllm_v1(k, gpu).0);
    let mla = layers
        .iter()
        .any(|c| matches!(c, LayerCache::MlaLatent { .. }));
    let mut block = k.block_size.unwrap_or(16);
    if mla {
        match gpu.sm_major {
            9 => block = 64,
            10 => block = 128,
            _ => {}
        }
    }
    let state_page = layers.iter().map(|c| c.state_bytes(k)).max().unwrap_or(0);
    // The attention page of one token the alignment uses: the model's own kv heads and head
    // size (`FullAttentionSpec(block_size=1, ...)`), i.e. the first attention layer's.
    let attn_token = layers
        .iter()
        .map(|c| token_bytes(c, kv, tp))
        .find(|&b| b > 0)
        .unwrap_or(0);
    if state_page > 0 && attn_token > 0 {
        let aligned = 16 * state_page.div_ceil(16 * attn_token);
        if k.block_size.is_none_or(|b| b < aligned) {
            block = aligned;
        }
    }
    let attn_page = block * attn_token;
    // (kind, window, per-token bytes or state bytes) of each layer, in order.
    type Spec = (&'static str, Option<u64>, u64);
    let spec = |c: &LayerCache| -> Spec {
        match *c {
            LayerCache::Full { .. } => ("full", None, block * token_bytes(c, kv, tp)),
            LayerCache::Sliding { window, .. } if window < max_len => {
                ("sliding", Some(window), block * token_bytes(c, kv, tp))
            }
            LayerCache::Sliding { .. } => ("full", None, block * token_bytes(c, kv, tp)),
            LayerCache::MlaLatent { .. } => {
                let entry = token_bytes(c, kv, tp);
                let entry = if mla_aligned {
                    entry.div_ceil(256) * 256
                } else {
                    entry
                };
                ("mla", None, block * entry)
            }
            LayerCache::State { .. } => ("state", None, c.state_bytes(k)),
        }
    };
    // Types in first-seen order with their layer counts.
    let mut types: Vec<(Spec, u64)> = Vec::new();
    for c in layers {
        let s = spec(c);
        match types.iter_mut().find(|(t, _)| *t == s) {
            Some((_, n)) => *n += 1,
            None => types.push((s, 1)),
        }
    }
    let padded = |kind: &str, p: u64| {
        if kind == "state" && attn_page > p {
            attn_page
        } else {
            p
        }
    };
    let page = types
        .iter()
        .map(|((kind, _, p), _)| padded(kind, *p))
        .max()
        .unwrap_or(0);
    let min_n = types.iter().map(|(_, n)| *n).min().unwrap_or(1).max(1);
    let max_n = types.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let per_group = if (max_n as f64) < min_n as f64 * 1.5 {
        max_n
    } else {
        min_n
    };
    let groups = types
        .iter()
        .map(|&((kind, window, p), n)| {
            let own = padded(kind, p);
            let block_size = if kind == "state" {
                max_len
            } else if own > 0 && page % own == 0 {
                block * (page / own)
            } else {
                block * page.div_ceil(own.max(1))
            };
            let mut g = KvGroup {
                kind,
                layers: n,
                groups: n.div_ceil(per_group),
                layers_per_group: per_group,
                block_size,
                page_bytes: page,
                spec_page_bytes: p,
                window,
                blocks_per_request: 0,
                state_slots: None,
            };
            g.blocks_per_request = vllm_blocks(&g, max_len, mnbt);
            g
        })
        .collect();
    VllmLayout {
        groups,
        page,
        layers_per_group: per_group,
    }
}

/// Weight storage (`--quantization`, or the config's `quantization_config.quant_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// The model's dtype.
    None,
    /// FP8 weights (one byte, per-tensor or per-channel scales).
    Fp8,
    /// INT8 weights (W8A8, one byte with per-channel scales: compressed-tensors' `w8a8`).
    Int8,
    /// AWQ 4-bit, group 128: fp16 scale and 4-bit zero per group.
    Awq,
    /// GPTQ 4-bit, group 128: fp16 scale and 4-bit zero per group.
    Gptq,
    /// bitsandbytes NF4, block 64 with an fp32 absmax per block.
    Bitsandbytes,
    /// MXFP4: 4-bit elements, an 8-bit shared exponent per 32.
    Mxfp4,
}

impl Quantization {
    /// Bytes per weight of a quantized linear layer (embeddings and the head stay in dtype).
    pub fn linear_bytes(self, dtype: f64) -> f64 {
        match self {
            Quantization::None => dtype,
            Quantization::Fp8 | Quantization::Int8 => 1.0,
            Quantization::Awq | Quantization::Gptq => 0.5 + 2.0 / 128.0 + 0.5 / 128.0,
            Quantization::Bitsandbytes => 0.5 + 4.0 / 64.0,
            Quantization::Mxfp4 => 0.5 + 1.0 / 32.0,
        }
    }
    /// Parses a `--quantization` value or a `quant_method`.
    pub fn parse(s: &str) -> Option<Quantization> {
        Some(match s.to_ascii_lowercase().as_str() {
            "none" => Quantization::None,
            "fp8" | "fbgemm_fp8" | "compressed-tensors-fp8" => Quantization::Fp8,
            "int8" | "w8a8" | "compressed-tensors-w8a8" => Quantization::Int8,
            "awq" | "awq_marlin" => Quantization::Awq,
            "gptq" | "gptq_marlin" => Quantization::Gptq,
            "bitsandbytes" | "bnb" => Quantization::Bitsandbytes,
            "mxfp4" => Quantization::Mxfp4,
            _ => return None,
        })
    }
}

/// The engine's knobs, named as the engine names them. `None`: the engine's default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Knobs {
    /// vLLM `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: Option<f64>,
    /// `--max-model-len` (SGLang `--context-length`); default the model's positions.
    pub max_model_len: Option<u64>,
    /// vLLM `--max-num-seqs`.
    pub max_num_seqs: Option<u64>,
    /// vLLM `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u64>,
    /// Bytes per KV element (`--kv-cache-dtype`: auto = the model dtype, fp8 = 1).
    pub kv_bytes: Option<u64>,
    /// `--tensor-parallel-size`.
    pub tp: u64,
    /// `--pipeline-parallel-size`.
    pub pp: u64,
    /// vLLM `--enforce-eager` (no CUDA graphs; SGLang `--disable-cuda-graph`).
    pub enforce_eager: bool,
    /// vLLM `--block-size` (16); SGLang `--page-size` (1).
    pub block_size: Option<u64>,
    /// `--quantization`.
    pub quantization: Quantization,
    /// Bytes of the model dtype (`--dtype`: 2 for auto/bfloat16/float16, 4 for float32).
    pub dtype_bytes: u64,
    /// SGLang `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// SGLang `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// SGLang `--chunked-prefill-size`.
    pub chunked_prefill_size: Option<u64>,
    /// SGLang `--cuda-graph-max-bs`.
    pub cuda_graph_max_bs: Option<u64>,
    /// `VLLM_USE_V1=0`: vLLM's V0 engine where the version still has it (to 0.10). V0
    /// (`vllm/worker/worker.py` `determine_num_available_blocks`) has no chunked prefill up to
    /// 32K tokens, so the profile run is one batch of `max(max_model_len, 2048)` tokens;
    /// `max_num_seqs` 256; the concurrency logged is the pool's tokens over `max_model_len`.
    /// Without it the version decides (see `engine`: V0 to 0.7, V1 from 0.8 with V0 fallbacks).
    pub vllm_v0: bool,
    /// `VLLM_USE_V1=1`: vLLM's V1 engine on 0.7 and earlier, where V0 is the default.
    pub vllm_v1: bool,
    /// `--data-parallel-size` (vLLM) / `--dp-size` (SGLang): replicas of the TP group.
    pub dp: u64,
    /// vLLM `--enable-expert-parallel`: experts spread whole over the TP × DP GPUs instead of
    /// each expert's matrices split by TP.
    pub expert_parallel: bool,
    /// SGLang `--ep-size`: experts spread whole over this many of the TP GPUs.
    pub ep: u64,
    /// SGLang `--enable-dp-attention`: attention runs TP over `tp / dp` GPUs (its weights and KV
    /// heads split `tp / dp` ways), the MoE over all `tp`.
    pub dp_attention: bool,
    /// Bytes of a Mamba2 / Gated DeltaNet recurrent-state element (vLLM
    /// `--mamba-ssm-cache-dtype`); `None`: the model dtype. The CLI sets it from the config's
    /// `mamba_ssm_dtype` ([`config_mamba_ssm_bytes`]) as vLLM does.
    pub mamba_ssm_bytes: Option<u64>,
    /// `--engine-version` as numbers (`None`: the pinned version). What depends on it: SGLang
    /// 0.4's `mem_fraction_static` by TP size and its chunked-prefill and CUDA-graph defaults
    /// (`server_args.py` `__post_init__`), and which engine (`vllm_v0`) vLLM runs.
    pub engine_version: Option<[u32; 3]>,
    /// The longest `max_model_len` the engine accepts and its default, when the config's
    /// `rope_scaling` stretches it beyond `max_position_embeddings` (the caller reads the config
    /// by the engine's rule: vLLM 0.11 `vllm/config/model.py` `_get_and_verify_max_len`, SGLang
    /// 0.5.3 `srt/utils/hf_transformers_utils.py` `get_context_length`). `None`: the model's
    /// positions.
    pub derived_max_model_len: Option<u64>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            gpu_memory_utilization: None,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_bytes: None,
            tp: 1,
            pp: 1,
            enforce_eager: false,
            block_size: None,
            quantization: Quantization::None,
            dtype_bytes: 2,
            mem_fraction_static: None,
            max_total_tokens: None,
            chunked_prefill_size: None,
            cuda_graph_max_bs: None,
            vllm_v0: false,
            vllm_v1: false,
            dp: 1,
            expert_parallel: false,
            ep: 1,
            dp_attention: false,
            mamba_ssm_bytes: None,
            engine_version: None,
            derived_max_model_len: None,
        }
    }
}

/// The longest `max_model_len` the engine accepts without an override, and its default.
pub fn model_max_len(t: &Transformer, k: &Knobs) -> u64 {
    k.derived_max_model_len.unwrap_or(t.max_positions)
}

/// What the engine would do at start-up on one GPU of the job (the worst pipeline stage).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// The engine.
    pub engine: Engine,
    /// The version whose rules apply (the asked one, or the pinned one).
    pub engine_version: String,
    /// The device total the engine sees (bytes).
    pub total_bytes: u64,
    /// The budget: vLLM `total × gpu_memory_utilization`; SGLang the static part,
    /// `free before loading × mem_fraction_static`.
    pub budget_bytes: u64,
    /// vLLM `gpu_memory_utilization` or SGLang `mem_fraction_static` in force.
    pub memory_fraction: f64,
    /// Weights on one GPU, quantization metadata included.
    pub weights_bytes: u64,
    /// Memory outside PyTorch that the engine's budget sees grow (vLLM: cuBLAS handles, NCCL
    /// and custom all-reduce buffers at TP > 1; SGLang: the CUDA context before loading).
    pub non_torch_bytes: u64,
    /// Peak of the profiling run above the weights (vLLM; SGLang reserves for it instead).
    pub activation_peak_bytes: u64,
    /// CUDA-graph memory (beyond the budget in vLLM before 0.19; inside SGLang's reserve).
    pub cuda_graph_bytes: u64,
    /// Whether the CUDA graphs are inside the budget (vLLM 0.19+ subtracts them before sizing the
    /// KV cache; SGLang's reserve holds them) rather than on top of it (vLLM before 0.19).
    pub cuda_graph_in_budget: bool,
    /// The KV cache pool.
    pub kv_cache_bytes: u64,
    /// Tokens the pool holds, as the engine logs them.
    pub kv_cache_tokens: u64,
    /// Blocks (vLLM) or pages (SGLang) of the pool.
    pub kv_cache_blocks: u64,
    /// The pool per layer kind: vLLM's KV-cache groups (one page size for all), SGLang's
    /// token pool per kind.
    pub kv_groups: Vec<KvGroup>,
    /// Requests of `max_model_len` tokens the pool holds at once.
    pub max_concurrency: f64,
    /// `max_model_len` in force.
    pub max_model_len: u64,
    /// vLLM `max_num_seqs` / SGLang `cuda_graph_max_bs` in force.
    pub max_num_seqs: u64,
    /// vLLM `max_num_batched_tokens` / SGLang `chunked_prefill_size` in force.
    pub max_num_batched_tokens: u64,
    /// Whether the engine starts.
    pub starts: bool,
    /// The largest `max_model_len` one request of which fits the pool (capped at the model's).
    pub max_model_len_that_fits: u64,
    /// The lines the engine would log at start-up (or its error).
    pub log: Vec<String>,
    /// What is estimated rather than read from the engine's source.
    pub assumes: Vec<&'static str>,
}

/// Validates the knobs against the model; one-line errors.
fn validate(t: &Transformer, k: &Knobs) -> Result<()> {
    if let Some(u) = k.gpu_memory_utilization {
        if !(u > 0.0 && u <= 1.0) {
            return Err(Error::Capacity(format!(
                "--gpu-memory-utilization {u} is outside (0, 1]"
            )));
        }
    }
    if let Some(u) = k.mem_fraction_static {
        if !(u > 0.0 && u <= 1.0) {
            return Err(Error::Capacity(format!(
                "--mem-fraction-static {u} is outside (0, 1]"
            )));
        }
    }
    if k.tp == 0 || k.pp == 0 || k.tp > 1024 || k.pp > 1024 {
        return Err(Error::Capacity(
            "--tensor-parallel-size and --pipeline-parallel-size must be between 1 and 1024".into(),
        ));
    }
    if k.dp == 0 || k.dp > 1024 || k.ep == 0 || k.ep > 1024 {
        return Err(Error::Capacity(
            "--data-parallel-size and --ep-size must be between 1 and 1024".into(),
        ));
    }
    if k.ep > 1 && k.tp % k.ep != 0 {
        return Err(Error::Capacity(format!(
            "--ep-size {} does not divide --tp-size {} (SGLang spreads the experts over the TP GPUs)",
            k.ep, k.tp
        )));
    }
    if k.dp_attention && (k.dp < 2 || k.tp % k.dp != 0) {
        return Err(Error::Capacity(format!(
            "--enable-dp-attention needs a --dp-size of at least 2 that divides --tp-size {} (attention runs TP over tp / dp GPUs)",
            k.tp
        )));
    }
    if (k.expert_parallel || k.ep > 1) && t.experts < 2 {
        return Err(Error::Capacity(format!(
            "`{}` has no experts to spread (expert parallelism is for MoE models)",
            t.name
        )));
    }
    if t.heads % k.tp != 0 {
        return Err(Error::Capacity(format!(
            "--tensor-parallel-size {} does not divide the model's {} attention heads",
            k.tp, t.heads
        )));
    }
    if k.pp > t.layers {
        return Err(Error::Capacity(format!(
            "--pipeline-parallel-size {} exceeds the model's {} layers",
            k.pp, t.layers
        )));
    }
    if let Some(l) = k.max_model_len {
        if l == 0 {
            return Err(Error::Capacity("--max-model-len must be at least 1".into()));
        }
        let limit = model_max_len(t, k);
        if l > limit {
            return Err(Error::Capacity(match k.derived_max_model_len {
                None => format!(
                    "--max-model-len {l} is larger than the model's max_position_embeddings {limit} and its config has no rope_scaling that stretches it (vLLM: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLang: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 to override)"
                ),
                Some(_) => format!(
                    "--max-model-len {l} is larger than the model's {limit} positions (max_position_embeddings {} stretched by its rope_scaling)",
                    t.max_positions
                ),
            }));
        }
    }
    for (name, v) in [
        ("--max-num-seqs", k.max_num_seqs),
        ("--max-num-batched-tokens", k.max_num_batched_tokens),
        ("--block-size", k.block_size),
        ("--max-total-tokens", k.max_total_tokens),
        ("--chunked-prefill-size", k.chunked_prefill_size),
        ("--cuda-graph-max-bs", k.cuda_graph_max_bs),
    ] {
        if v == Some(0) || v.is_some_and(|v| v > 1 << 32) {
            return Err(Error::Capacity(format!(
                "{name} must be between 1 and 2^32"
            )));
        }
    }
    if t.layout != vram_model::arch::Layout::DecoderOnly {
        return Err(Error::Capacity(format!(
            "`{}` is not a decoder-only model; vLLM and SGLang serve it only as a pooling model, which has no KV cache to size",
            t.name
        )));
    }
    Ok(())
}

/// Weights on the most loaded GPU of a `tp × pp` job: layers split evenly over stages (the first
/// holds the embedding, the last the final norm and head), tensor-parallel parts split by `tp`
/// (vocabulary padded to a multiple of 64, `DEFAULT_VOCAB_PADDING_SIZE`), quantized linear
/// layers at their storage's bytes; plus the rotary `cos_sin_cache` (`[max_positions,
/// head_dim]` in the model dtype). Expert and data parallelism move parts around
/// ([`parallel_widths`]): vLLM's `--enable-expert-parallel` spreads whole experts over the
/// `tp × dp` GPUs; SGLang's `--enable-dp-attention` splits attention `tp / dp` ways.
///
/// Without `--quantization`, a checkpoint shipped quantized (the config's FP8 blocks or MXFP4
/// experts, as `vram_model::blocks::Storage` reads them) is counted as stored: on one GPU its
/// exact stored bytes, and under TP/PP the same share of them that the layout puts on the most
/// loaded GPU of the unquantized model. vLLM's MXFP4 MoE kernels then lay the experts out padded
/// to their tile sizes (`engine::vllm_mxfp4_layout`): what loading takes can exceed what is stored.
pub fn weights_per_gpu(t: &Transformer, k: &Knobs, gpu: &Gpu, engine: Engine) -> u64 {
    let logical = logical_weights_per_gpu(t, k);
    let mxfp4 = k.quantization == Quantization::Mxfp4
        || t.blocks.storage.quant == vram_model::blocks::Quant::Mxfp4;
    let base = if k.quantization != Quantization::None
        || t.blocks.storage.quant == vram_model::blocks::Quant::None
    {
        logical
    } else {
        let one = Knobs {
            tp: 1,
            pp: 1,
            dp: 1,
            expert_parallel: false,
            dp_attention: false,
            ..*k
        };
        let rotary = (t.max_positions * t.head_dim * k.dtype_bytes) as f64;
        let whole = logical_weights_per_gpu(t, &one) as f64;
        let stored = t.blocks.weights_bytes(false) as f64 + rotary;
        (logical as f64 * stored / whole.max(1.0)).round() as u64
    };
    if engine != Engine::Vllm {
        return base;
    }
    let padding = if mxfp4 { mxfp4_padding(t, k, gpu) } else { 0 };
    base + padding + mla_absorbed_bytes(t, k)
}

/// What vLLM before 0.8 keeps beside the MLA weights on the most loaded GPU
/// (`engine::vllm_mla_absorbs`): `W_Q_UK` (`q_in × heads × kv_lora_rank`) and `W_UV_O`
/// (`heads × kv_lora_rank × hidden`) in the model dtype, heads split by TP, and for a quantized
/// checkpoint the dequantized `kv_b_proj` (`kv_lora_rank × heads × (qk_nope + v)`) they come from.
fn mla_absorbed_bytes(t: &Transformer, k: &Knobs) -> u64 {
    use vram_model::blocks::Mixer;
    if !engine::vllm_mla_absorbs(k) {
        return 0;
    }
    let n = (t.blocks.len() as u64).div_ceil(k.pp) as usize;
    t.blocks
        .iter()
        .take(n)
        .map(|b| match b.mixer {
            Mixer::Mla(m) => {
                let heads = m.heads.div_ceil(attention_tp(k));
                let q_in = m.q_lora_rank.unwrap_or(t.hidden);
                let mut elems = q_in * heads * m.kv_lora_rank + heads * m.kv_lora_rank * t.hidden;
                if k.quantization != Quantization::None {
                    elems += m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
                }
                elems * k.dtype_bytes
            }
            _ => 0,
        })
        .sum()
}

/// The expert feed-forward's intermediate size and whether it is gated, for an MoE model.
fn moe_shape(t: &Transformer) -> Option<(u64, bool)> {
    use vram_model::blocks::Ffn;
    t.blocks.kinds.iter().find_map(|kind| match kind.ffn {
        Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) => Some((m.expert_intermediate, m.gated)),
        _ => None,
    })
}

/// Bytes vLLM's MXFP4 MoE layout adds on the most loaded GPU: every expert matrix padded to
/// `round_up(hidden, h) × round_up(intermediate per GPU, i)` (MXFP4 elements of half a byte
/// plus an 8-bit scale per 32).
fn mxfp4_padding(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    let Some((inter, gated)) = moe_shape(t) else {
        return 0;
    };
    let (_, im, hm) = engine::vllm_mxfp4_layout(k, gpu);
    let (etp, _) = expert_split(k);
    let per_gpu_experts = t.experts.div_ceil(if k.expert_parallel { etp } else { 1 });
    let i_part = if k.expert_parallel {
        inter
    } else {
        inter.div_ceil(k.tp)
    };
    let mats = if gated { 3 } else { 2 };
    let elems = |h: u64, i: u64| per_gpu_experts * mats * h * i;
    let padded = elems(t.hidden.div_ceil(hm) * hm, i_part.div_ceil(im) * im);
    let plain = elems(t.hidden, i_part);
    let layers_here = t.layers.div_ceil(k.pp);
    let bytes = 0.5 + 1.0 / 32.0;
    ((padded - plain) as f64 * bytes) as u64 * layers_here
}

/// How the experts are split: `(ways, whole)`: vLLM with `--enable-expert-parallel` spreads
/// whole experts over `tp × dp` GPUs; otherwise each expert's matrices are split `tp` ways
/// (SGLang's `--ep-size` spreads whole experts over `ep` of the TP GPUs and splits each the
/// remaining `tp / ep` ways: the same bytes per GPU).
fn expert_split(k: &Knobs) -> (u64, bool) {
    if k.expert_parallel {
        (k.tp * k.dp, true)
    } else {
        (k.tp, false)
    }
}

/// The attention's tensor-parallel size: `tp`, or `tp / dp` with SGLang's DP attention.
fn attention_tp(k: &Knobs) -> u64 {
    if k.dp_attention {
        (k.tp / k.dp).max(1)
    } else {
        k.tp
    }
}

/// The ways attention, experts and the rest of a layer are split on one GPU.
fn parallel_widths(k: &Knobs) -> (f64, f64, f64) {
    (
        attention_tp(k) as f64,
        expert_split(k).0 as f64,
        k.tp as f64,
    )
}

fn logical_weights_per_gpu(t: &Transformer, k: &Knobs) -> u64 {
    let split = t.param_split();
    let d = k.dtype_bytes as f64;
    let q = k.quantization.linear_bytes(d);
    let tp = k.tp as f64;
    let (attn_ways, expert_ways, rest_ways) = parallel_widths(k);
    let sharded = (split.per_layer - split.per_layer_replicated) as f64;
    let (qw, kvw) = t.attn_widths();
    let attn = ((t.hidden * (qw + 2 * kvw) + qw * t.hidden) as f64).min(sharded);
    let experts = if t.experts > 1 {
        ((t.experts * split.per_expert) as f64).min(sharded - attn)
    } else {
        0.0
    };
    let rest = sharded - attn - experts;
    let layer = (attn / attn_ways + experts / expert_ways + rest / rest_ways) * q
        + split.per_layer_replicated as f64 * d;
    let layers_here = t.layers.div_ceil(k.pp) as f64;
    let vocab_padded = (t.vocab.div_ceil(64) * 64) as f64;
    let embed = vocab_padded * t.hidden as f64 / tp * d;
    let head_matrix = if t.tied_embeddings {
        0.0
    } else {
        vocab_padded * t.hidden as f64 / tp * d
    };
    let head_rest = split.head as f64
        - if t.tied_embeddings {
            0.0
        } else {
            (t.vocab * t.hidden) as f64
        };
    let rotary = (t.max_positions * t.head_dim) as f64 * d;
    let first = embed + layers_here * layer + rotary;
    let last = layers_here * layer + head_matrix + head_rest.max(0.0) * d + rotary;
    let one = if k.pp == 1 {
        embed + t.layers as f64 * layer + head_matrix + head_rest.max(0.0) * d + rotary
    } else {
        first.max(last)
    };
    one.round() as u64
}

/// What PyTorch's caching allocator reserves beyond the weights' own bytes on the most loaded
/// GPU (`c10/cuda/CUDACachingAllocator.cpp`: a request of 10 MiB (`kMinLargeAlloc`) or more
/// gets a segment rounded up to 2 MiB (`kRoundLarge`); smaller ones share 1 MiB and 20 MiB
/// segments, counted as packed). An engine that measures its weights by free device memory
/// (SGLang) sees this; one that reads `memory_allocated` (vLLM's "Model loading took") does
/// not. The tensors are the fused ones each engine holds per layer: QKV, the attention output,
/// gate-up (or up) and down projections (MoE: each stacked over the experts), the embedding and
/// an untied head, each split by TP.
pub fn allocator_rounding(t: &Transformer, k: &Knobs) -> u64 {
    const ROUND: u64 = 2 * MIB;
    const LARGE: u64 = 10 * MIB;
    let waste = |bytes: f64| -> u64 {
        let b = bytes.ceil() as u64;
        if b >= LARGE {
            b.div_ceil(ROUND) * ROUND - b
        } else {
            0
        }
    };
    let d = k.dtype_bytes as f64;
    let q = k.quantization.linear_bytes(d);
    let tp = k.tp;
    let h = t.hidden;
    let (qw, kvw) = t.attn_widths();
    let f = t.intermediate.div_ceil(tp);
    let experts = t.experts.max(1);
    let up = if matches!(t.mlp, Mlp::Gated) {
        2 * f
    } else {
        f
    };
    let per_layer = waste((h * (qw + 2 * kvw).div_ceil(tp)) as f64 * q)
        + waste((qw.div_ceil(tp) * h) as f64 * q)
        + waste((experts * h * up) as f64 * q)
        + waste((experts * f * h) as f64 * q);
    let vocab = (t.vocab.div_ceil(64) * 64).div_ceil(tp);
    let table = waste((vocab * h) as f64 * d);
    let tables = if t.tied_embeddings { table } else { 2 * table };
    t.layers.div_ceil(k.pp) * per_layer + tables
}

/// KV-cache bytes one more token of context costs on the most loaded GPU: the full-attention
/// and MLA layers of the first pipeline stage (sliding layers stop growing at their window,
/// states never grow), at `--kv-cache-dtype`.
pub fn kv_bytes_per_token(t: &Transformer, k: &Knobs) -> u64 {
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    stage_layers(t, k.pp)
        .iter()
        .filter(|c| matches!(c, LayerCache::Full { .. } | LayerCache::MlaLatent { .. }))
        .map(|c| token_bytes(c, kv, attention_tp(k)))
        .sum()
}

/// Bytes per token of one layer's cache on one GPU (`State`: 0).
fn token_bytes(c: &LayerCache, kv: u64, tp: u64) -> u64 {
    match *c {
        LayerCache::Full {
            kv_heads,
            head_dim,
            v_head_dim,
        } => kv_heads.div_ceil(tp).max(1) * (head_dim + v_head_dim) * kv,
        LayerCache::Sliding {
            kv_heads, head_dim, ..
        } => kv_heads.div_ceil(tp).max(1) * 2 * head_dim * kv,
        LayerCache::MlaLatent {
            kv_lora_rank,
            rope_dim,
        } => (kv_lora_rank + rope_dim) * kv,
        LayerCache::State { .. } => 0,
    }
}

/// Activation peak of a forward over `tokens` tokens on one GPU, in the model dtype: the largest
/// live set inside one decoder layer as the engine's modules hold their tensors.
///
/// Eager PyTorch (vLLM V0, V1 with `--enforce-eager`, SGLang): `LlamaDecoderLayer.forward` keeps
/// the residual and the post-attention-norm output it passes to the MLP, and `LlamaMLP.forward`
/// (`gate_up, _ = self.gate_up_proj(x); x = self.act_fn(gate_up); x, _ = self.down_proj(x)`,
/// `vllm/model_executor/models/llama.py`, the same in every version read) keeps `gate_up` as a
/// local until it returns, so at `down_proj` the residual, the normed input, `gate_up` (2f),
/// the activation (f) and the output (h) are live: `tokens × (3h + 3f)`. A plain MLP rebinds its
/// one local: `tokens × (3h + 2f)`. Under `torch.compile` (vLLM V1's default) Inductor frees each
/// buffer after its last use: the larger of residual + normed input + `gate_up` and residual +
/// `gate_up` + activation. MoE layers (`fused_moe`) allocate their three intermediate caches up
/// front, `[M, top_k, 2f]`, `[M·top_k, f]` and `[M, top_k, h]`, over chunks of at most
/// `VLLM_FUSED_MOE_CHUNK_SIZE` = 32768 tokens. Attention (the fused QKV output, the attention
/// output and `o_proj`'s) is counted where it is larger.
fn forward_peak(t: &Transformer, tokens: u64, k: &Knobs, compiled: bool) -> u64 {
    let d = k.dtype_bytes;
    let tp = k.tp;
    let h = t.hidden;
    let (q, kv) = t.attn_widths();
    let qkv = (q + 2 * kv).div_ceil(tp);
    let q_tp = q.div_ceil(tp);
    let f = t.intermediate.div_ceil(tp);
    let gated = matches!(t.mlp, Mlp::Gated);
    let attn = tokens * (3 * h + qkv + q_tp);
    let mlp = if t.experts > 1 {
        let m = tokens.min(32768);
        let topk = t.experts_per_token.max(1);
        tokens * 3 * h + m * topk * (3 * f + h)
    } else if compiled {
        let up = if gated { 2 * f } else { f };
        tokens * (h + (h + up).max(up + f))
    } else if gated {
        tokens * (3 * h + 3 * f)
    } else {
        tokens * (3 * h + 2 * f)
    };
    attn.max(mlp) * d
}

/// Peak of the sampler's dummy run over `reqs` rows of logits, plus the profile run's hidden
/// states (`tokens × h`, held by `profile_run` until the sampler returns).
///
/// vLLM V1 (`GPUModelRunner._dummy_sampler_run`: "the sampler may skip top_k, top_p, and
/// logprobs"): the logits in the model dtype, `Sampler.forward`'s fp32 copy, `random_sample`'s
/// softmax probabilities and its exponential noise (`q = torch.empty_like(probs)`), fp32 each.
/// vLLM V0 (`ModelRunner.profile_run` samples with `top_p=0.99, top_k=vocab_size - 1`): the
/// logits, their fp32 copy, and inside `_apply_top_k_top_p` PyTorch's CUDA sort of the fp32 row
/// (sorted values, int64 indices, the int64 index input and cub's radix-sort double buffers of
/// both), which is larger than what the function holds once the sort returns (the sorted values
/// and indices, both masks, the softmax, its cumulative sum and the re-scattered logits).
fn sampler_peak(t: &Transformer, reqs: u64, tokens: u64, k: &Knobs, sorts: bool) -> u64 {
    let v = t.vocab.div_ceil(64) * 64;
    let d = k.dtype_bytes;
    let hidden = tokens * t.hidden * d;
    let per_element = if sorts {
        // during the sort: fp32 input 4, values out 4, indices in 8 and out 8, cub's alternate
        // buffers 4 + 8; after it: values 4, indices 8, masks 1 + 1, softmax 4, cumsum 4, new 4.
        (d + 4 + 4 + 8 + 8 + 4 + 8).max(d + 4 + 4 + 8 + 1 + 4 + 4 + 1 + 4)
    } else {
        d + 3 * 4
    };
    reqs * v * per_element + hidden
}

/// vLLM's CUDA graph capture sizes for `max_num_seqs` (`CompilationConfig`: 1, 2, 4, then
/// multiples of 8 up to 512, capped at `max_num_seqs`).
fn vllm_capture_sizes(max_num_seqs: u64) -> Vec<u64> {
    let mut v = vec![1, 2, 4];
    v.extend((1..=64).map(|i| i * 8));
    let cap = max_num_seqs.min(512);
    v.retain(|&s| s <= cap);
    v
}

/// The capacity of `t` served by `engine` on `gpu` with `knobs`, as the engine computes it at
/// start-up (the CUDA context is the GPU's, [`vram_model::gpu::Gpu::context_bytes`]).
pub fn capacity(t: &Transformer, gpu: &Gpu, engine: Engine, knobs: &Knobs) -> Result<Capacity> {
    validate(t, knobs)?;
    match engine {
        Engine::Vllm => Ok(vllm(t, gpu, knobs)),
        Engine::Sglang => Ok(sglang(t, gpu, knobs)),
    }
}

/// Layers of this pipeline stage's cache (the first stage's `⌈layers / pp⌉`).
fn stage_layers(t: &Transformer, pp: u64) -> Vec<LayerCache> {
    let all = layer_caches(t);
    let n = (t.blocks.len() as u64).div_ceil(pp) as usize;
    all.into_iter().take(n).collect()
}

fn vllm(t: &Transformer, gpu: &Gpu, k: &Knobs) -> Capacity {
    let total = gpu.memory_bytes;
    let (v1, fallback) = engine::vllm_v1(k, gpu);
    let v0 = !v1;
    let big = total as f64 >= 70.0 * GIB && !gpu.id.starts_with("a100");
    let max_len = k.max_model_len.unwrap_or(model_max_len(t, k));
    let (seqs_default, tokens_default) = if v0 {
        // V0's EngineArgs: chunked prefill only above 32K tokens (then 2048 a step).
        (
            256,
            if max_len <= 32768 {
                max_len.max(2048)
            } else {
                2048
            },
        )
    } else if big {
        (1024, 8192)
    } else {
        (256, 2048)
    };
    let max_num_seqs = k.max_num_seqs.unwrap_or(seqs_default);
    let mut mnbt = k.max_num_batched_tokens.unwrap_or(tokens_default);
    let util = k.gpu_memory_utilization.unwrap_or(0.9);
    // Chunked prefill is on in V1; a batch is at least one sequence's worth of tokens only
    // when chunking is off. The scheduler's budget is also at least max_num_seqs.
    mnbt = mnbt.max(max_num_seqs.min(mnbt));
    let weights = weights_per_gpu(t, k, gpu, Engine::Vllm);
    let reqs = max_num_seqs.min(mnbt);
    // V1 profiles the torch.compile'd model unless --enforce-eager; V0 runs it eagerly.
    let compiled = !v0 && !k.enforce_eager;
    let sorts = engine::vllm_sampler_sorts(k, v1, reqs);
    let activation = forward_peak(t, mnbt, k, compiled).max(sampler_peak(t, reqs, mnbt, k, sorts));
    // Memory outside PyTorch that appears after the snapshot (kernel images, library handles,
    // NCCL and custom all-reduce buffers at TP/PP > 1), by version (`engine::vllm_non_torch`).
    let (non_torch, non_torch_source) = engine::vllm_non_torch(k, v1);
    let graphs = if k.enforce_eager {
        0
    } else {
        let sizes = vllm_capture_sizes(max_num_seqs);
        let largest = sizes.last().copied().unwrap_or(1);
        // One shared memory pool: the largest captured batch's live set, plus each graph's
        // own bookkeeping (about 1 MiB per graph per 8 layers, an assumption).
        forward_peak(t, largest, k, true) + sizes.len() as u64 * t.layers.div_ceil(8) * MIB
    };
    // From 0.20 the worker subtracts its CUDA-graph estimate before sizing the KV cache
    // (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` on by default; 0.19 only logs "Estimated CUDA
    // graph memory: X GiB total"); before, graphs come on top of the budget.
    let graphs_in_budget = engine::vllm_graphs_in_budget(k, v1, gpu);
    let budget = (total as f64 * util) as u64;
    let non_kv = weights + activation + non_torch + if graphs_in_budget { graphs } else { 0 };
    let available = budget as i128 - non_kv as i128;
    let layers = stage_layers(t, k.pp);
    let layout = vllm_layout(&layers, k, gpu, max_len, mnbt);
    let page = layout.page;
    let group_size = layout.layers_per_group;
    let (num_blocks, tokens, v1_concurrency) = layout.pool(available.max(0) as u64, max_len, mnbt);
    let kv_bytes = num_blocks * page * group_size;
    // What `check_enough_kv_cache_memory` and `estimate_max_model_len` sum: every layer's
    // `max_memory_usage_bytes`, padding layers apart.
    let layer_bytes_for = |len: u64| -> u64 {
        layout
            .groups
            .iter()
            .map(|g| g.layers * vllm_blocks(g, len, mnbt) * page)
            .sum()
    };
    let max_concurrency = if v0 {
        tokens as f64 / max_len as f64
    } else {
        v1_concurrency
    };
    // Largest length one request of which fits: the bytes needed grow with the length.
    let fits_len = |len: u64| available > 0 && layer_bytes_for(len) <= available as u64;
    let max_fit = if num_blocks == 0 || !fits_len(1) {
        0
    } else if fits_len(max_len) {
        max_len
    } else {
        let (mut lo, mut hi) = (1u64, max_len);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits_len(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let starts = available > 0 && max_fit >= max_len;
    let gib = |b: f64| b / GIB;
    let mut log = vec![format!("Model loading took {:.4} GiB", gib(weights as f64))];
    if let Some(st) = layout.groups.iter().find(|g| g.kind == "state") {
        let attn = layout.groups.iter().find(|g| g.kind != "state");
        if let Some(a) = attn {
            if k.block_size.is_none_or(|b| b < a.block_size) {
                log.insert(
                    0,
                    format!(
                        "Setting attention block size to {} tokens to ensure that attention page size is >= mamba page size.",
                        a.block_size
                    ),
                );
            }
        }
        if st.page_bytes > st.spec_page_bytes && st.spec_page_bytes > 0 {
            log.insert(
                1.min(log.len()),
                format!(
                    "Padding mamba page size by {:.2}% to ensure that mamba page size and attention page size are exactly equal.",
                    100.0 * (st.page_bytes - st.spec_page_bytes) as f64 / st.spec_page_bytes as f64
                ),
            );
        }
    }
    if graphs_in_budget && graphs > 0 {
        log.push(format!(
            "Estimated CUDA graph memory: {:.2} GiB total (estimated)",
            gib(graphs as f64)
        ));
    }
    if available <= 0 {
        log.push(
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
                .into(),
        );
    } else {
        log.push(format!(
            "Available KV cache memory: {:.2} GiB",
            gib(available as f64)
        ));
        if !starts && v0 {
            // V0 (`worker.py` `raise_if_cache_size_invalid`, 0.6.4): the pool's tokens.
            log.push(format!(
                "ValueError: The model's max seq len ({max_len}) is larger than the maximum number of tokens that can be stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
            ));
        } else if !starts {
            let needed = layer_bytes_for(max_len);
            log.push(format!(
                "ValueError: To serve at least one request with the models's max seq len ({max_len}), ({:.2} GiB KV cache is needed, which is larger than the available KV cache memory ({:.2} GiB). Based on the available memory, the estimated maximum model length is {max_fit}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                gib(needed as f64),
                gib(available as f64)
            ));
        } else {
            log.push(format!("GPU KV cache size: {} tokens", thousands(tokens)));
            log.push(format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                thousands(max_len),
                max_concurrency
            ));
            if !k.enforce_eager && !graphs_in_budget {
                log.push(format!(
                    "Graph capturing finished, took {:.2} GiB (estimated)",
                    gib(graphs as f64)
                ));
            }
        }
    }
    // Before 0.19 the graphs come on top of the budget: they must fit what the budget left.
    let context = gpu.context_bytes();
    let beyond = if graphs_in_budget { 0 } else { graphs };
    let over = budget as i128 + beyond as i128 + context as i128 - total as i128;
    let starts = starts && over <= 0;
    if !starts && available > 0 && max_fit >= max_len {
        log.push(
            "torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs (the budget leaves less than the graphs need; lower --gpu-memory-utilization or add --enforce-eager)"
                .into(),
        );
    }
    if let Some(why) = fallback {
        log.insert(
            0,
            format!("{why} is not supported by the V1 Engine. Falling back to V0."),
        );
    }
    let mut assumes = vec![if v0 {
        "vLLM V0 (worker.determine_num_available_blocks, ModelRunner.profile_run with top-k/top-p sampling, EngineArgs defaults; V0 runs up to 0.7, and from 0.8 to 0.10 where V1 falls back: compute capability < 8.0, fp32, an fp8 KV cache off Hopper, VLLM_USE_V1=0)"
    } else {
        "vLLM V1 (gpu_worker.determine_available_memory, kv_cache_utils, arg_utils defaults for `vllm serve`; read at 0.10.1, 0.11.0, 0.14.1, 0.19.0 and 0.20.0)"
    }];
    if t.blocks.storage.quant == vram_model::blocks::Quant::Mxfp4
        || k.quantization == Quantization::Mxfp4
    {
        let (kernel, im, hm) = engine::vllm_mxfp4_layout(k, gpu);
        assumes.push(match (kernel, im, hm) {
            ("Marlin", ..) => "MXFP4 experts in the Marlin layout (compute capability < 9, or Hopper before 0.11): the hidden size padded to 256 and the intermediate size per GPU to 128 (Mxfp4MoEMethod.create_weights)",
            ("Triton", ..) => "MXFP4 experts in the Triton layout (Hopper from 0.11): the intermediate size per GPU padded to 64; vLLM 0.14-0.19 logs about 6% more than this on H100 (not explained by the layout code read)",
            _ => "MXFP4 experts in the FlashInfer/ROCm layout: the hidden and intermediate sizes padded to 256 (128 for ROCm before 0.11)",
        });
    }
    if layout.groups.len() > 1 || layout.groups.iter().any(|g| g.kind == "mla") {
        assumes.push("KV layout per layer kind (kv_groups): layers grouped by spec, one page size for all groups (v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, read at a 2026 main commit; 0.11's rule may differ when two kinds' layer counts are within 1.5x); Mamba2/Gated DeltaNet state in MambaStateShapeCalculator's shapes, the attention block raised to 16 x ceil(state page / 16 tokens' page) and the state padded to it (models/config.py HybridAttentionMambaModelConfig); MLA blocks of 64 tokens on Hopper (FlashMLA) and 128 on Blackwell (CUTLASS MLA), platforms/cuda.py; the profile run of state layers, vision encoders and the hybrid FULL_AND_PIECEWISE CUDA graphs are not modelled");
    }
    Capacity {
        engine: Engine::Vllm,
        engine_version: version_label(Engine::Vllm, k),
        total_bytes: total,
        budget_bytes: budget,
        memory_fraction: util,
        weights_bytes: weights,
        non_torch_bytes: non_torch,
        activation_peak_bytes: activation,
        cuda_graph_bytes: graphs,
        cuda_graph_in_budget: graphs_in_budget,
        kv_cache_bytes: kv_bytes,
        kv_cache_tokens: tokens,
        kv_cache_blocks: num_blocks,
        kv_groups: layout.groups,
        max_concurrency,
        max_model_len: max_len,
        max_num_seqs,
        max_num_batched_tokens: mnbt,
        starts,
        max_model_len_that_fits: max_fit,
        log,
        assumes: assumes.into_iter().chain([
            "the device total is the GPU catalog's memory (torch's total_memory, as vLLM's total_gpu_memory; a driver reading where the catalog knows no torch figure)",
            if compiled && sorts {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens under torch.compile and the dummy sampler's top-k/top-p sort (V1 before 0.17: logits.sort over min(max_num_seqs, tokens) rows with PyTorch's CUDA sort buffers) plus the hidden states"
            } else if compiled {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens under torch.compile (residual and gate_up with the normed input or the activation) and the sampler's logits, fp32 copy, probabilities and noise over min(max_num_seqs, tokens) rows (top-k/top-p by the Triton kernel, 0.17+) plus the hidden states (read from llama.py and the V1 sampler; the same layer structure assumed for every model)"
            } else if v0 || sorts {
                "activation peak: the profile run's larger of one eager layer's live set over max_num_batched_tokens (residual, normed input, gate_up held by LlamaMLP.forward, activation and down_proj output) and the top-k/top-p sampler over min(max_num_seqs, tokens) rows with PyTorch's CUDA sort buffers plus the hidden states (read from llama.py and sampler.py; the same layer structure assumed for every model)"
            } else {
                "activation peak: the profile run's larger of one eager layer's live set over max_num_batched_tokens (residual, normed input, gate_up held by LlamaMLP.forward, activation and down_proj output) and the sampler's logits, fp32 copy, probabilities and noise over min(max_num_seqs, tokens) rows plus the hidden states (read from llama.py and the V1 sampler; the same layer structure assumed for every model)"
            },
            non_torch_source,
            if graphs_in_budget {
                "CUDA graphs: the largest captured batch's forward live set plus 1 MiB per graph per 8 layers, subtracted before the KV cache as 0.20+ does (estimated)"
            } else {
                "CUDA graphs: the largest captured batch's forward live set plus 1 MiB per graph per 8 layers, beyond the budget (estimated)"
            },
        ]).collect(),
    }
}

fn sglang(t: &Transformer, gpu: &Gpu, k: &Knobs) -> Capacity {
    let total = gpu.memory_bytes;
    let gpu_mib = (total / MIB) as f64;
    let v04 = Engine::Sglang.version_in_force(k) < [0, 5, 0];
    // 0.4 (`ServerArgs.__post_init__`): chunked prefill 2048 and CUDA graphs up to 8 (TP < 4)
    // or 80 below 25,000 MiB, else 8192 and 160; `mem_fraction_static` by TP size alone.
    // 0.5 (`_handle_gpu_memory_settings`): the memory bucket's defaults.
    let (cps, gbs) = if v04 {
        if gpu_mib < 25_000.0 {
            (2048, if k.tp < 4 { 8 } else { 80 })
        } else {
            (8192, 160)
        }
    } else if gpu_mib < 20.0 * 1024.0 {
        (2048, 8)
    } else if gpu_mib < 35.0 * 1024.0 {
        (2048, if k.tp < 4 { 24 } else { 80 })
    } else if gpu_mib < 60.0 * 1024.0 {
        (4096, if k.tp < 4 { 32 } else { 160 })
    } else if gpu_mib < 160.0 * 1024.0 {
        (8192, if k.tp < 4 { 256 } else { 512 })
    } else {
        (16384, 512)
    };
    let cps = k.chunked_prefill_size.unwrap_or(cps);
    let gbs = k.cuda_graph_max_bs.unwrap_or(gbs);
    let mfs = k.mem_fraction_static.unwrap_or_else(|| {
        if v04 {
            return match k.tp {
                16.. => 0.79,
                8.. => 0.81,
                4.. => 0.85,
                2.. => 0.87,
                _ => 0.88,
            };
        }
        let mut reserved = 512.0 + (cps.max(2048) as f64) * 1.5 + gbs as f64 * 2.0;
        reserved += (k.tp * k.pp) as f64 / 8.0 * 1024.0;
        if gpu_mib > 60.0 * 1024.0 {
            reserved = reserved.max(10.0 * 1024.0);
        }
        (((gpu_mib - reserved) / gpu_mib) * 1000.0).round() / 1000.0
    });
    let max_len = k.max_model_len.unwrap_or(model_max_len(t, k));
    let page_size = k.block_size.unwrap_or(1);
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    // SGLang's "Load weight end ... mem usage" is the drop in free device memory while loading:
    // the weights as the caching allocator reserves them.
    let weights = weights_per_gpu(t, k, gpu, Engine::Sglang) + allocator_rounding(t, k);
    // get_available_gpu_memory before loading ("Load weight begin. avail mem="): the device less
    // the CUDA context and, at TP/PP > 1, what `init_torch_distributed` allocated (NCCL
    // communicators, custom all-reduce buffers).
    let context = gpu.context_bytes()
        + if k.tp * k.pp > 1 {
            SGLANG_DISTRIBUTED_INIT_BYTES
        } else {
            0
        };
    let pre = total.saturating_sub(context) as f64 / GIB;
    let post = pre - weights as f64 / GIB;
    let rest = post - pre * (1.0 - mfs);
    let layers = stage_layers(t, k.pp);
    // Mamba2 / Gated DeltaNet states (`MambaPool`, `model_runner` `_handle_max_mamba_cache`,
    // read at a 2026 snapshot): without `--max-mamba-cache-size` or speculative decoding the
    // state pool takes `rest × r / (1 + r)` (`--mamba-full-memory-ratio` r = 0.9) in whole
    // requests of `mamba_cache_per_req` bytes, and the token pool what is left. The states'
    // shapes are vLLM's; conv in bf16 (`CONV_DTYPE`), recurrent state in `--mamba-ssm-dtype`
    // (float32 unless the knob says otherwise).
    let state_knobs = Knobs {
        dtype_bytes: 2,
        mamba_ssm_bytes: Some(k.mamba_ssm_bytes.unwrap_or(4)),
        ..*k
    };
    let per_req: u64 = layers.iter().map(|c| c.state_bytes(&state_knobs)).sum();
    let (rest, mamba_slots) = if per_req > 0 && rest > 0.0 {
        let budget = rest * SGLANG_MAMBA_FULL_MEMORY_RATIO / (1.0 + SGLANG_MAMBA_FULL_MEMORY_RATIO);
        let n = (budget * GIB / per_req as f64) as u64;
        (rest - (n * per_req) as f64 / GIB, Some(n))
    } else {
        (rest, None)
    };
    let cell: u64 = layers
        .iter()
        .map(|c| token_bytes(c, kv, attention_tp(k)))
        .sum();
    let mut tokens = if rest > 0.0 && cell > 0 {
        (rest * GIB / cell as f64) as u64
    } else {
        0
    };
    if let Some(m) = k.max_total_tokens {
        tokens = tokens.min(m);
    }
    tokens = tokens / page_size * page_size;
    let mut kv_bytes = tokens * cell;
    // Sliding-window layers (`SWAKVPool`, `model_runner` `set_num_token_hybrid`): the tokens
    // sized as if every attention layer were full are shared out so that
    // `swa × swa_layers + full × full_layers = tokens × layers` with `swa = full ×
    // --swa-full-tokens-ratio` (0.8), each rounded down to the page; the full layers' count is
    // the pool's `max_total_num_tokens`.
    let attn: Vec<&LayerCache> = layers
        .iter()
        .filter(|c| !matches!(c, LayerCache::State { .. }))
        .collect();
    let n_swa = attn
        .iter()
        .filter(|c| matches!(c, LayerCache::Sliding { window, .. } if *window < max_len))
        .count() as u64;
    let mut swa_tokens = None;
    if n_swa > 0 && (n_swa as usize) < attn.len() {
        let n_full = attn.len() as u64 - n_swa;
        let total = (tokens * attn.len() as u64) as f64;
        let full = (total / (SGLANG_SWA_FULL_TOKENS_RATIO * n_swa as f64 + n_full as f64)) as u64;
        let swa = (full as f64 * SGLANG_SWA_FULL_TOKENS_RATIO) as u64;
        let (full, swa) = (full / page_size * page_size, swa / page_size * page_size);
        kv_bytes = attn
            .iter()
            .map(|c| {
                let n = match c {
                    LayerCache::Sliding { window, .. } if *window < max_len => swa,
                    _ => full,
                };
                n * token_bytes(c, kv, attention_tp(k))
            })
            .sum();
        tokens = full;
        swa_tokens = Some(swa);
    }
    let starts = tokens > 0;
    let max_fit = tokens.min(max_len);
    // A hybrid model's requests also each hold one state slot.
    let max_concurrency =
        (tokens as f64 / max_len as f64).min(mamba_slots.map_or(f64::INFINITY, |n| n as f64));
    let activation = forward_peak(t, cps, k, false);
    let graphs = if k.enforce_eager {
        0
    } else {
        forward_peak(t, gbs, k, false) + gbs.div_ceil(8) * t.layers.div_ceil(8) * MIB
    };
    // SGLang's "GB" is GiB (`GB = 1024 * 1024 * 1024` in mem_cache/memory_pool.py).
    let half = kv_bytes as f64 / 2.0 / GIB;
    let mut log = vec![format!(
        "Load weight end. avail mem={:.2} GB, mem usage={:.2} GB.",
        post,
        weights as f64 / GIB
    )];
    if let Some(swa) = swa_tokens {
        log.push(format!(
            "Use sliding window memory pool. full_layer_tokens={tokens}, swa_layer_tokens={swa}"
        ));
    }
    if starts {
        log.push(format!(
            "KV Cache is allocated. #tokens: {tokens}, K size: {half:.2} GB, V size: {half:.2} GB"
        ));
        log.push(format!(
            "max_total_num_tokens={tokens}, chunked_prefill_size={cps}, context_len={max_len}, mem_fraction_static={mfs}"
        ));
    } else {
        log.push(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.".into(),
        );
    }
    Capacity {
        engine: Engine::Sglang,
        engine_version: version_label(Engine::Sglang, k),
        total_bytes: total,
        budget_bytes: (pre * mfs * GIB) as u64,
        memory_fraction: mfs,
        weights_bytes: weights,
        non_torch_bytes: context,
        activation_peak_bytes: activation,
        cuda_graph_bytes: graphs,
        cuda_graph_in_budget: true,
        kv_cache_bytes: kv_bytes,
        kv_cache_tokens: tokens,
        kv_cache_blocks: tokens / page_size,
        kv_groups: sglang_kinds(&layers, kv, &state_knobs, page_size, max_len, mamba_slots),
        max_concurrency,
        max_model_len: max_len,
        max_num_seqs: gbs,
        max_num_batched_tokens: cps,
        starts,
        max_model_len_that_fits: max_fit,
        log,
        assumes: vec![
            if v04 {
                "SGLang 0.4 (server_args.ServerArgs.__post_init__: mem_fraction_static by TP size, chunked prefill and CUDA-graph batch by GPU memory; model_runner.profile_max_num_token)"
            } else {
                "SGLang 0.5 (server_args._handle_gpu_memory_settings, model_runner.profile_max_num_token)"
            },
            "free memory before loading: the device total less the CUDA context (the GPU's) and, at TP/PP > 1, 0.13 GiB for init_torch_distributed (measured by SGLang on 4 x L4; estimated elsewhere)",
            "activation peak and CUDA graphs are inside SGLang's reserve (1 - mem_fraction_static); their figures here are estimates, not part of the pool's size",
        ]
        .into_iter()
        .chain(
            layers
                .iter()
                .any(|c| matches!(c, LayerCache::Sliding { .. }))
                .then_some("SGLang's sliding-window pool (SWAKVPool, model_runner.set_num_token_hybrid, read at a 2026 snapshot): the all-full token count shared out with swa = 0.8 x full, for every model with sliding layers (SGLang enables it per architecture; --disable-hybrid-swa-memory not modelled)"),
        )
        .chain(mamba_slots.map(|_| "SGLang's Mamba/Gated DeltaNet state pool (model_runner._handle_max_mamba_cache, read at a 2026 snapshot): rest x 0.9 / 1.9 in whole requests of conv (bf16) + recurrent (float32) state, the token pool the remainder; no speculative decoding"))
        .collect(),
    }
}

/// SGLang's token pool per layer kind: one cell per token of every attention and MLA layer
/// (`MHATokenToKVPool` / `MLATokenToKVPool`), pages of `--page-size` tokens. Sliding layers are
/// priced as full ones and state layers are outside the token pool (SGLang's `SWAKVPool` and
/// `MambaPool` are not modelled; their layers are listed with their state's bytes).
fn sglang_kinds(
    layers: &[LayerCache],
    kv: u64,
    k: &Knobs,
    page_size: u64,
    len: u64,
    mamba_slots: Option<u64>,
) -> Vec<KvGroup> {
    let mut out: Vec<KvGroup> = Vec::new();
    for c in layers {
        let (kind, window) = match *c {
            LayerCache::Full { .. } => ("full", None),
            LayerCache::Sliding { window, .. } => ("sliding", Some(window)),
            LayerCache::MlaLatent { .. } => ("mla", None),
            LayerCache::State { .. } => ("state", None),
        };
        let page = if kind == "state" {
            c.state_bytes(k)
        } else {
            page_size * token_bytes(c, kv, attention_tp(k))
        };
        match out
            .iter_mut()
            .find(|g| g.kind == kind && g.window == window)
        {
            Some(g) => {
                g.layers += 1;
                g.layers_per_group += 1;
            }
            None => out.push(KvGroup {
                kind,
                layers: 1,
                groups: 1,
                layers_per_group: 1,
                block_size: page_size,
                page_bytes: page,
                spec_page_bytes: page,
                window,
                blocks_per_request: 0,
                state_slots: None,
            }),
        }
    }
    for g in &mut out {
        g.blocks_per_request = if g.kind == "state" {
            g.state_slots = mamba_slots;
            1
        } else {
            len.min(g.window.unwrap_or(u64::MAX)).div_ceil(page_size)
        };
    }
    out
}

/// `0.6.5`, `0.11` (no patch asked or pinned: `major.minor`).
fn version_label(e: Engine, k: &Knobs) -> String {
    match k.engine_version {
        Some([a, b, 0]) => format!("{a}.{b}"),
        Some([a, b, c]) => format!("{a}.{b}.{c}"),
        None if e == Engine::Vllm && k.vllm_v0 => "0.6".into(),
        None => e.pinned_version().into(),
    }
}

/// A serving engine's start-up failure, read from its log for `vram doctor`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StartupError {
    /// vLLM: one request of `max_model_len` does not fit the KV cache (V1's "To serve at least
    /// one request with the models's max seq len (L), (X GiB KV cache is needed, which is larger
    /// than the available KV cache memory (Y GiB) ... estimated maximum model length is M", or
    /// V0's "The model's max seq len (L) is larger than the maximum number of tokens that can be
    /// stored in KV cache (T)").
    VllmMaxSeqLen {
        /// The `max_model_len` asked for.
        max_model_len: u64,
        /// KV cache one request needs, bytes (V1).
        needed_bytes: Option<u64>,
        /// KV cache available, bytes (V1).
        available_bytes: Option<u64>,
        /// The largest length that fits: V1's estimate, or V0's token count.
        max_model_len_that_fits: Option<u64>,
    },
    /// vLLM: "No available memory for the cache blocks": weights and the profile's peak exceed
    /// `total × gpu_memory_utilization`.
    VllmNoCacheMemory,
    /// SGLang: "Not enough memory. Please try to increase --mem-fraction-static."
    SglangNotEnoughMemory,
}

fn number_after(text: &str, key: &str) -> Option<f64> {
    let i = text.find(key)? + key.len();
    let rest = text[i..].trim_start_matches([' ', '(', ':']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(rest.len());
    rest[..end].replace(',', "").parse().ok()
}

/// Recognises a vLLM or SGLang start-up failure in `log` (a message or a whole log) and reads
/// its figures; `None` when there is none. Pure: the doctor passes the text in, and then asks
/// [`capacity`] and [`crate::suggest::serving`] for the figures and the change that fixes it.
pub fn startup_error(log: &str) -> Option<StartupError> {
    if log.contains("Not enough memory. Please try to increase --mem-fraction-static") {
        return Some(StartupError::SglangNotEnoughMemory);
    }
    if log.contains("No available memory for the cache blocks") {
        return Some(StartupError::VllmNoCacheMemory);
    }
    let gib = |x: f64| (x * GIB).round() as u64;
    if let Some(i) = log.find("max seq len (") {
        let tail = &log[i..];
        let len = number_after(tail, "max seq len (")? as u64;
        if tail.contains("KV cache is needed") {
            return Some(StartupError::VllmMaxSeqLen {
                max_model_len: len,
                needed_bytes: number_after(tail, "), (").map(gib),
                available_bytes: number_after(tail, "available KV cache memory (").map(gib),
                max_model_len_that_fits: number_after(tail, "maximum model length is")
                    .map(|x| x as u64),
            });
        }
        if tail.contains("stored in KV cache") {
            return Some(StartupError::VllmMaxSeqLen {
                max_model_len: len,
                needed_bytes: None,
                available_bytes: None,
                max_model_len_that_fits: number_after(tail, "stored in KV cache (")
                    .map(|x| x as u64),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use vram_model::arch::Model;
    use vram_model::catalog;

    fn llama3() -> Transformer {
        match catalog::lookup("llama-3-8b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    #[test]
    fn vllm_llama3_8b_on_h100_by_hand() {
        let t = llama3();
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(8192),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        // Weights: 8,030,261,248 bf16 parameters plus the rotary cache (8192 x 128 x 2 bytes).
        assert_eq!(c.weights_bytes, 2 * 8_030_261_248 + 8192 * 128 * 2);
        // One block of one layer: 16 tokens x 2 x 8 heads x 128 x 2 bytes = 64 KiB; 32 layers.
        let available =
            c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes;
        assert_eq!(c.kv_cache_blocks, available / (65536 * 32));
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks * 16);
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / 512.0).abs() < 1e-9);
        assert!(c.starts);
        assert_eq!(c.max_model_len_that_fits, 8192);
    }

    #[test]
    fn bad_knobs_are_refused() {
        let t = llama3();
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        for k in [
            Knobs {
                gpu_memory_utilization: Some(1.5),
                ..Knobs::default()
            },
            Knobs {
                gpu_memory_utilization: Some(0.0),
                ..Knobs::default()
            },
            Knobs {
                tp: 3,
                ..Knobs::default()
            },
            Knobs {
                max_model_len: Some(1 << 20),
                ..Knobs::default()
            },
        ] {
            assert!(matches!(
                capacity(&t, gpu, Engine::Vllm, &k),
                Err(Error::Capacity(_))
            ));
        }
    }

    #[test]
    fn too_long_a_context_names_the_length_that_fits() {
        let t = match catalog::lookup("llama-3.1-405b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            tp: 8,
            quantization: Quantization::Fp8,
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        if !c.starts {
            assert!(c.max_model_len_that_fits < c.max_model_len);
        }
        // The fitting length is the largest one: one more token needs a block more than the
        // pool has, or it is the model's maximum.
        let mut k2 = k;
        k2.max_model_len = Some(c.max_model_len_that_fits.max(1));
        let c2 = capacity(&t, gpu, Engine::Vllm, &k2).unwrap();
        assert!(
            c.max_model_len_that_fits == 0
                || c2.max_model_len_that_fits == c.max_model_len_that_fits
        );
    }

    #[test]
    fn startup_errors_are_read_from_real_messages() {
        // vllm-project/vllm#10517 (V0) and QwenLM/Qwen3#295.
        let v0 = "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.";
        assert_eq!(
            startup_error(v0),
            Some(StartupError::VllmMaxSeqLen {
                max_model_len: 29000,
                needed_bytes: None,
                available_bytes: None,
                max_model_len_that_fits: Some(23648)
            })
        );
        let v1 = "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.86 GiB). Based on the available memory, the estimated maximum model length is 39792. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.";
        match startup_error(v1) {
            Some(StartupError::VllmMaxSeqLen {
                max_model_len: 131072,
                needed_bytes: Some(n),
                available_bytes: Some(a),
                max_model_len_that_fits: Some(39792),
            }) => {
                assert_eq!(n, 16 << 30);
                assert!((a as f64 / GIB - 4.86).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            startup_error(
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
            ),
            Some(StartupError::SglangNotEnoughMemory)
        );
        assert_eq!(
            startup_error("CUDA out of memory. Tried to allocate 2.00 GiB"),
            None
        );
        // The message this module writes for a run that does not start is read back.
        let t = llama3();
        let gpu = vram_model::gpu::lookup("rtx-4090").unwrap();
        let k = Knobs {
            max_model_len: Some(8192),
            gpu_memory_utilization: Some(0.68),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        let read = c.log.iter().find_map(|l| startup_error(l));
        assert!(!c.starts && read.is_some(), "{:?}", c.log);
    }

    #[test]
    fn sglang_defaults_follow_the_memory_buckets() {
        let t = llama3();
        let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
        let c = capacity(&t, h100, Engine::Sglang, &Knobs::default()).unwrap();
        // The H100's torch total (79.19 GiB, whole MiB): reserve max(512 + 8192 x 1.5 + 256 x 2
        // + 128, 10240) = 13440 MiB.
        let mib = (h100.memory_bytes / MIB) as f64;
        assert!(
            (c.memory_fraction - ((mib - 13440.0) / mib * 1000.0).round() / 1000.0).abs() < 1e-9
        );
        assert_eq!(c.max_num_batched_tokens, 8192);
        let cell = 32 * 8 * 256 * 2;
        assert_eq!(c.kv_cache_bytes, c.kv_cache_tokens * cell);
        assert!(c.starts);
        // One token pool of 32 full layers, pages of one token (8 heads × 256 × 2 B).
        assert_eq!(c.kv_groups.len(), 1);
        assert_eq!(
            (
                c.kv_groups[0].kind,
                c.kv_groups[0].layers,
                c.kv_groups[0].page_bytes
            ),
            ("full", 32, 8 * 256 * 2)
        );
    }

    fn qwq32b() -> Transformer {
        // Qwen/QwQ-32B's config.json (March 2025), as in vram-cli's serving test data.
        let text = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu",
            "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 131072,
            "max_window_layers": 64, "model_type": "qwen2", "num_attention_heads": 40,
            "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false,
            "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064}"#;
        match vram_model::hf::parse_config(text, "qwq-32b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    #[test]
    fn versions_are_read_with_their_patch_level() {
        assert_eq!(parse_version("0.6.5"), Some([0, 6, 5]));
        assert_eq!(parse_version("0.11"), Some([0, 11, 0]));
        assert_eq!(parse_version("v0.4.3.post4"), Some([0, 4, 3]));
        assert_eq!(parse_version("0.1.dev8168+g475c1a0"), Some([0, 1, 0]));
        assert_eq!(parse_version("0.4.3post4"), Some([0, 4, 3]));
        assert_eq!(parse_version("x"), None);
    }

    /// V0's profile run by hand (Llama-3.1-8B: h 4096, f 14336, vocabulary 128256): one batch of
    /// `max_model_len` tokens through the eager layer, whose peak is the residual, the normed
    /// input, gate_up, the activation and down_proj's output; at 8192 tokens the top-k/top-p
    /// sampler over 256 rows is larger. The RTX 3090 log (vllm#10517) printed 2.07 and 2.99 GiB
    /// for 20000 and 29000 tokens, the H100 one (vllm#10511) 1.26 GiB at 8192.
    #[test]
    fn v0_profile_peak_is_the_eager_layer_or_the_sort() {
        let t = match catalog::lookup("llama-3.1-8b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        for (len, want) in [
            (20000u64, 20000 * (3 * 4096 + 3 * 14336) * 2),
            (29000, 29000 * (3 * 4096 + 3 * 14336) * 2),
            (8192, 256 * 128256 * 38 + 8192 * 4096 * 2),
        ] {
            let k = Knobs {
                max_model_len: Some(len),
                engine_version: Some([0, 6, 4]),
                ..Knobs::default()
            };
            let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
            assert_eq!(c.activation_peak_bytes, want, "{len}");
        }
    }

    /// V1 compiles the model (Inductor frees each buffer after its last use) unless
    /// --enforce-eager; its dummy sampler's top-k/top-p runs as a Triton kernel from 0.17 and as
    /// a sort before.
    #[test]
    fn v1_profile_peak_follows_compilation() {
        let t = llama3();
        let gpu = vram_model::gpu::lookup("a100-40g").unwrap();
        let eager = Knobs {
            max_model_len: Some(8192),
            max_num_batched_tokens: Some(8192),
            enforce_eager: true,
            engine_version: Some([0, 19, 0]),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &eager).unwrap();
        assert_eq!(c.activation_peak_bytes, 8192 * (3 * 4096 + 3 * 14336) * 2);
        let compiled = Knobs {
            enforce_eager: false,
            ..eager
        };
        let c = capacity(&t, gpu, Engine::Vllm, &compiled).unwrap();
        let forward = 8192 * (4096 + 3 * 14336) * 2;
        let sampler = 256 * 128256 * (2 + 12) + 8192 * 4096 * 2;
        assert_eq!(c.activation_peak_bytes, forward.max(sampler));
        // 0.15 sorts: the fp32 row, its values and int64 indices and cub's buffers (38 B).
        let sorted = capacity(
            &t,
            gpu,
            Engine::Vllm,
            &Knobs {
                engine_version: Some([0, 15, 1]),
                ..compiled
            },
        )
        .unwrap();
        let sort = 256 * 128256 * 38 + 8192 * 4096 * 2;
        assert_eq!(sorted.activation_peak_bytes, forward.max(sort));
    }

    /// From 0.20 the CUDA graphs are subtracted before the KV cache is sized
    /// (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 1 in 0.20.0's envs.py, 0 in 0.19.0's).
    #[test]
    fn vllm_0_20_puts_the_graphs_inside_the_budget() {
        let t = llama3();
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(8192),
            engine_version: Some([0, 19, 0]),
            ..Knobs::default()
        };
        let before = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        let after = capacity(
            &t,
            gpu,
            Engine::Vllm,
            &Knobs {
                engine_version: Some([0, 20, 0]),
                ..k
            },
        )
        .unwrap();
        assert!(!before.cuda_graph_in_budget && after.cuda_graph_in_budget);
        assert!(after.cuda_graph_bytes > 0);
        // One block of all 32 layers: 16 tokens x 2 x 8 heads x 128 x 2 bytes x 32 = 2 MiB.
        let page = 2 * MIB;
        let rest = |c: &Capacity| {
            c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes
        };
        assert_eq!(before.kv_cache_blocks, rest(&before) / page);
        assert_eq!(
            after.kv_cache_blocks,
            (rest(&after) - after.cuda_graph_bytes) / page
        );
        assert_eq!(after.engine_version, "0.20");
    }

    /// SGLang 0.4's defaults come from the TP size (4 x L4: 0.85, chunked prefill 2048, CUDA
    /// graphs up to 80), and its weights are what the caching allocator reserves: QwQ-32B at TP
    /// 4 rounds QKV (17.5 MiB), o_proj (12.5), gate_up (135) and down (67.5) up to 2 MiB, 3.5 MiB
    /// a layer, and each vocabulary table (185.625 MiB) by 0.75 MiB.
    #[test]
    fn sglang_0_4_defaults_and_reserved_weights() {
        let t = qwq32b();
        let l4 = vram_model::gpu::lookup("l4").unwrap();
        let k = Knobs {
            tp: 4,
            engine_version: Some([0, 4, 3]),
            ..Knobs::default()
        };
        let c = capacity(&t, l4, Engine::Sglang, &k).unwrap();
        assert_eq!(c.memory_fraction, 0.85);
        assert_eq!(c.max_num_batched_tokens, 2048);
        assert_eq!(c.max_num_seqs, 80);
        assert_eq!(allocator_rounding(&t, &k), 64 * 7 * MIB / 2 + 3 * MIB / 2);
        assert_eq!(
            c.weights_bytes,
            weights_per_gpu(&t, &k, l4, Engine::Sglang) + 64 * 7 * MIB / 2 + 3 * MIB / 2
        );
        // 0.5's rule for the same job reserves by the memory bucket instead.
        let c5 = capacity(
            &t,
            l4,
            Engine::Sglang,
            &Knobs {
                engine_version: None,
                ..k
            },
        )
        .unwrap();
        assert_ne!(c5.memory_fraction, 0.85);
    }

    fn model(id: &str) -> Transformer {
        match catalog::lookup(id).unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    fn kinds(c: &Capacity) -> Vec<(&'static str, u64, u64, u64, u64, u64)> {
        c.kv_groups
            .iter()
            .map(|g| {
                (
                    g.kind,
                    g.layers,
                    g.groups,
                    g.block_size,
                    g.page_bytes,
                    g.spec_page_bytes,
                )
            })
            .collect()
    }

    /// The pool's blocks from what vLLM had available, by hand: `available // page // layers
    /// per group` (`get_num_blocks`).
    fn available(c: &Capacity) -> u64 {
        c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes
    }

    /// Qwen3-Next-80B (Gated DeltaNet hybrid, 12 full + 36 linear layers) by hand from
    /// vLLM's source: the GDN state (`gated_delta_net_state_shape`) is conv `(3, 2·16·128 +
    /// 32·128 = 8192)` plus temporal `(32, 128, 128)`, 548,864 bf16 elements = 1,097,728 B; one
    /// token of attention is 2 × 2 kv heads × 256 × 2 B = 2048 B, so the attention block is
    /// 16 × ⌈1,097,728 / 32,768⌉ = 544 tokens and the page 1,114,112 B, the state padded by
    /// 1.49 %. Groups of 12 layers: 1 full + 3 state; tokens are `num_blocks // 4 × 544`; a
    /// request of 32,768 tokens takes ⌈32768 / 544⌉ = 61 blocks plus one per state group.
    #[test]
    fn vllm_qwen3_next_gdn_hybrid_by_hand() {
        let t = model("qwen3-next-80b-a3b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            tp: 4,
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        // TP 4: attention max(1, 2 / 4) = 1 kv head: 1024 B a token; state conv (3, 2048),
        // temporal (8, 128, 128): 137,216 elements = 274,432 B; block 16 × ⌈274432 / 16384⌉
        // = 272 tokens, page 278,528 B.
        assert_eq!(
            kinds(&c),
            vec![
                ("state", 36, 3, 32768, 278_528, 274_432),
                ("full", 12, 1, 272, 278_528, 278_528),
            ]
        );
        assert_eq!(c.kv_cache_blocks, available(&c) / 278_528 / 12);
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 4 * 272);
        let need = 32768u64.div_ceil(272) + 3;
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
        assert!(c.log[0].contains("Setting attention block size to 272 tokens"));
        assert!(
            c.log[1].contains("Padding mamba page size by 1.49%"),
            "{:?}",
            c.log
        );
        // TP 1 as the docstring computes it.
        let c1 = capacity(
            &t,
            vram_model::gpu::lookup("h200").unwrap(),
            Engine::Vllm,
            &Knobs { tp: 1, ..k },
        )
        .unwrap();
        assert_eq!(
            kinds(&c1),
            vec![
                ("state", 36, 3, 32768, 1_114_112, 1_097_728),
                ("full", 12, 1, 544, 1_114_112, 1_114_112),
            ]
        );
        assert_eq!(c1.kv_cache_tokens, c1.kv_cache_blocks / 4 * 544);
        assert_eq!(c1.kv_groups[1].blocks_per_request, 61);
    }

    /// Nemotron-H-56B (Mamba2 hybrid: 10 attention and 54 Mamba2 layers of 118) by hand:
    /// `mamba2_state_shape` conv `(3, 256·64 + 2·8·256 = 20480)`, temporal `(256, 64, 256)`:
    /// 4,255,744 elements = 8,511,488 B; attention 2 × 8 × 128 × 2 = 4096 B a token, block
    /// 16 × ⌈8,511,488 / 65,536⌉ = 2080, page 8,519,680 B. Groups of 10: 1 attention + 6 state
    /// (60 slots for 54 layers).
    #[test]
    fn vllm_nemotron_h_mamba2_hybrid_by_hand() {
        let t = model("nemotron-h-56b");
        let gpu = vram_model::gpu::lookup("h200").unwrap();
        let k = Knobs {
            max_model_len: Some(8192),
            tp: 2,
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        // TP 2: groups 8 divide; conv (3, 10240), temporal (128, 64, 256): 2,127,872 elements,
        // 4,255,744 B; attention 4 heads: 2048 B a token; block 16 × ⌈4,255,744 / 32,768⌉ =
        // 16 × 130 = 2080; page 4,259,840 B.
        let attn = c.kv_groups.iter().find(|g| g.kind == "full").unwrap();
        let state = c.kv_groups.iter().find(|g| g.kind == "state").unwrap();
        assert_eq!((attn.layers, attn.groups, attn.block_size), (10, 1, 2080));
        assert_eq!((state.layers, state.groups), (54, 6));
        assert_eq!(state.spec_page_bytes, 4_255_744);
        assert_eq!(state.page_bytes, 4_259_840);
        assert_eq!(c.kv_cache_blocks, available(&c) / 4_259_840 / 10);
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 7 * 2080);
        let need = 8192u64.div_ceil(2080) + 6;
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
        // TP 16 does not divide the 8 groups: vLLM replicates them to 16.
        let st = LayerCache::State {
            conv_dim: 256 * 64,
            groups: 8,
            group_dim: 512,
            conv_kernel: 4,
            heads: 256,
            head_state: 64 * 256,
        };
        assert_eq!(
            st.state_elements(16),
            ((16384 + 16 * 512) / 16 * 3, 16 * 64 * 256)
        );
        assert_eq!(st.state_elements(1), (20480 * 3, 256 * 64 * 256));
    }

    /// gpt-oss-20b: 12 sliding (window 128) and 12 full layers, 8 kv heads × 64: page 16 ×
    /// 2 × 8 × 64 × 2 = 32,768 B, two groups of 12; a request of 8192 tokens with 8192 batched
    /// tokens takes 512 blocks in the full group and ⌈min(127 + 8192, 8192) / 16⌉ + 1 = 513 in
    /// the sliding one; at 131,072 tokens the sliding group's share stays 521.
    #[test]
    fn vllm_gpt_oss_sliding_and_full_by_hand() {
        let t = model("gpt-oss-20b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(131072),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        assert_eq!(
            kinds(&c),
            vec![
                ("sliding", 12, 1, 16, 32768, 32768),
                ("full", 12, 1, 16, 32768, 32768)
            ]
        );
        assert_eq!(c.kv_groups[0].window, Some(128));
        assert_eq!(c.kv_groups[0].blocks_per_request, 521);
        assert_eq!(c.kv_groups[1].blocks_per_request, 8192);
        assert_eq!(c.kv_cache_blocks, available(&c) / 32768 / 12);
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 2 * 16);
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / (8192.0 + 521.0)).abs() < 1e-9);
    }

    /// Gemma 3 1B: 26 layers, every sixth full (4) and 22 sliding (window 512), 1 kv head ×
    /// 256: page 16 × 2 × 256 × 2 = 16,384 B; groups of 4: 1 full + 6 sliding (2 padding
    /// slots); tokens `num_blocks // 7 × 16`. A window of at least `max_model_len` is full
    /// attention: one group of 26.
    #[test]
    fn vllm_gemma3_sliding_groups_by_hand() {
        let t = model("gemma-3-1b");
        let gpu = vram_model::gpu::lookup("l4").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        assert_eq!(
            kinds(&c),
            vec![
                ("sliding", 22, 6, 16, 16384, 16384),
                ("full", 4, 1, 16, 16384, 16384)
            ]
        );
        assert_eq!(c.kv_cache_blocks, available(&c) / 16384 / 4);
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 7 * 16);
        // L4 (< 70 GiB): 2048 batched tokens; sliding ⌈min(511 + 2048, 32768) / 16⌉ + 1 = 161.
        let need = 2048 + 6 * 161;
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
        let short = capacity(
            &t,
            gpu,
            Engine::Vllm,
            &Knobs {
                max_model_len: Some(512),
                ..k
            },
        )
        .unwrap();
        assert_eq!(kinds(&short), vec![("full", 26, 1, 16, 16384, 16384)]);
    }

    /// DeepSeek-V3 (MLA, 61 layers): one latent of 512 + 64 per token, one head whatever the
    /// TP; FlashMLA's 64-token blocks on Hopper (73,728 B a page), 16 on Ampere (18,432 B).
    #[test]
    fn vllm_deepseek_v3_mla_pages_by_hand() {
        let t = model("deepseek-v3");
        let h200 = vram_model::gpu::lookup("h200").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            tp: 8,
            quantization: Quantization::Fp8,
            ..Knobs::default()
        };
        let c = capacity(&t, h200, Engine::Vllm, &k).unwrap();
        assert_eq!(kinds(&c), vec![("mla", 61, 1, 64, 73_728, 73_728)]);
        assert_eq!(c.kv_cache_blocks, available(&c) / 73_728 / 61);
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks * 64);
        assert!((c.max_concurrency - c.kv_cache_blocks as f64 / 512.0).abs() < 1e-9);
        let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
        let c = capacity(&t, a100, Engine::Vllm, &k).unwrap();
        assert_eq!(kinds(&c), vec![("mla", 61, 1, 16, 18_432, 18_432)]);
    }

    /// SGLang's state pool for Qwen3-Next at TP 4: per layer conv (2048 × 3) in bf16 and
    /// temporal (8, 128, 128) in float32, 12,288 + 524,288 = 536,576 B, 36 layers a request;
    /// the pool takes 0.9 / 1.9 of what is left, the token pool (12 full layers × 1 kv head ×
    /// 2 × 256 × 2 B = 12,288 B a token) the rest; concurrency is capped by the slots too.
    #[test]
    fn sglang_mamba_pool_by_hand() {
        let t = model("qwen3-next-80b-a3b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            tp: 4,
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
        let state = c.kv_groups.iter().find(|g| g.kind == "state").unwrap();
        assert_eq!((state.layers, state.page_bytes), (36, 536_576));
        let slots = state.state_slots.unwrap();
        let states = (slots * 36 * 536_576) as f64;
        let cell = 12 * 2 * 256 * 2;
        assert_eq!(c.kv_cache_bytes, c.kv_cache_tokens * cell);
        // Whole requests: the state pool is at most one request short of its share.
        let total = states + c.kv_cache_bytes as f64;
        let share = states / total;
        let one = (36 * 536_576) as f64 / total;
        assert!(
            share <= 0.9 / 1.9 && share > 0.9 / 1.9 - one - 1e-6,
            "{share}"
        );
        assert!(
            (c.max_concurrency - (c.kv_cache_tokens as f64 / 32768.0).min(slots as f64)).abs()
                < 1e-9
        );
        // Without states (a Llama) there is no slot count.
        let l = capacity(&llama3(), gpu, Engine::Sglang, &Knobs::default()).unwrap();
        assert!(l.kv_groups.iter().all(|g| g.state_slots.is_none()));
    }

    /// SGLang's sliding-window pool for gpt-oss-20b (12 sliding + 12 full layers, 8 kv heads ×
    /// 64, 2048 B a token a layer): the all-full count T becomes full = ⌊24T / (0.8 × 12 +
    /// 12)⌋ and swa = ⌊0.8 × full⌋; the pool holds both.
    #[test]
    fn sglang_swa_pool_by_hand() {
        let t = model("gpt-oss-20b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
        let line = c
            .log
            .iter()
            .find(|l| l.starts_with("Use sliding window memory pool"))
            .unwrap();
        let full = c.kv_cache_tokens;
        let swa = (full as f64 * 0.8) as u64;
        assert_eq!(
            line,
            &format!(
                "Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
            )
        );
        assert_eq!(c.kv_cache_bytes, 12 * 2048 * (full + swa));
        // The all-full count T it came from: a context no longer than the window makes every
        // layer full (the pool's memory does not depend on the context).
        let short = capacity(
            &t,
            gpu,
            Engine::Sglang,
            &Knobs {
                max_model_len: Some(128),
                ..k
            },
        )
        .unwrap();
        assert!(short.log.iter().all(|l| !l.contains("sliding window")));
        let all_full = short.kv_cache_tokens;
        assert_eq!(full, (all_full as f64 * 24.0 / (0.8 * 12.0 + 12.0)) as u64);
        assert!(c.kv_cache_bytes <= short.kv_cache_bytes + 24 * 2048);
        assert!((c.max_concurrency - full as f64 / 32768.0).abs() < 1e-9);
    }

    /// Qwen3.5's config ships `mamba_ssm_dtype: float32`; vLLM keeps the recurrent state in it:
    /// conv 10240 × 3 × 2 + 48 × 128 × 128 × 4 = 3,207,168 B; block 16 × ⌈3,207,168 / 65,536⌉
    /// = 784 tokens, page 3,211,264 B. vllm#40691 (vLLM 0.19.0, `--max-model-len 32768`,
    /// `--max-num-batched-token 16384`) logged "GPU KV cache size: 290,864 tokens" and
    /// "Maximum concurrency for 32,768 tokens per request: 33.04x": both follow from this layout
    /// with 1487 blocks (1487 // 4 × 784 and 1487 / (42 + 3)), and from no other block size.
    #[test]
    fn vllm_qwen3_5_fp32_state_matches_a_real_log() {
        let t = model("qwen3.5-27b");
        let cfg = catalog::config_text("qwen3.5-27b").unwrap();
        assert_eq!(config_mamba_ssm_bytes(cfg), Some(4));
        assert_eq!(config_mamba_ssm_bytes(r#"{"model_type": "llama"}"#), None);
        let gpu = vram_model::gpu::lookup("h20-141g").unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            max_num_seqs: Some(16),
            max_num_batched_tokens: Some(16384),
            mamba_ssm_bytes: Some(4),
            engine_version: Some([0, 19, 0]),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        assert_eq!(
            kinds(&c),
            vec![
                ("state", 48, 3, 32768, 3_211_264, 3_207_168),
                ("full", 16, 1, 784, 3_211_264, 3_211_264)
            ]
        );
        let layers = stage_layers(&t, 1);
        let layout = vllm_layout(&layers, &k, gpu, 32768, 16384);
        let (blocks, tokens, conc) = layout.pool(1487 * 3_211_264 * 16, 32768, 16384);
        assert_eq!((blocks, tokens), (1487, 290_864));
        assert_eq!(format!("{conc:.2}"), "33.04");
        // In bf16 (no config dtype) the block would be 400 tokens and the log impossible.
        let bf16 = vllm_layout(
            &layers,
            &Knobs {
                mamba_ssm_bytes: None,
                ..k
            },
            gpu,
            32768,
            16384,
        );
        assert_eq!(bf16.min_block(), 400);
        assert_ne!(290_864 % 400, 0);
    }

    /// Qwen3.5-27B (48 GDN + 16 full layers, 4 kv heads × 256, GDN 16 key and 48 value heads):
    /// state conv (3, 2·16·128 + 48·128 = 10240), temporal (48, 128, 128): 817,152 elements,
    /// 1,634,304 B; attention 4096 B a token; block 16 × ⌈1,634,304 / 65,536⌉ = 400; page
    /// 1,638,400 B. Groups of 16: 1 full + 3 state.
    #[test]
    fn vllm_qwen3_5_gdn_hybrid_by_hand() {
        let t = model("qwen3.5-27b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            max_model_len: Some(16384),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        assert_eq!(
            kinds(&c),
            vec![
                ("state", 48, 3, 16384, 1_638_400, 1_634_304),
                ("full", 16, 1, 400, 1_638_400, 1_638_400)
            ]
        );
        assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 4 * 400);
        // A --block-size above the aligned one is kept, the state padded to it.
        let c = capacity(
            &t,
            gpu,
            Engine::Vllm,
            &Knobs {
                block_size: Some(512),
                ..k
            },
        )
        .unwrap();
        assert_eq!(c.kv_groups[1].block_size, 512);
        assert_eq!(c.kv_groups[0].page_bytes, 512 * 4096);
        assert!(!c.log[0].contains("Setting attention block size"));
    }

    /// vLLM's `--enable-expert-parallel` spreads whole experts over TP × DP GPUs: Qwen3-30B-A3B
    /// (48 layers of 128 experts, each 3 × 2048 × 768 bf16) at TP 4, DP 2 holds 1/8 of them per
    /// GPU instead of 1/4, everything else unchanged.
    #[test]
    fn expert_parallel_spreads_the_experts_over_tp_times_dp() {
        let t = model("qwen3-30b-a3b");
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let tp4 = Knobs {
            tp: 4,
            dp: 2,
            ..Knobs::default()
        };
        let ep = Knobs {
            expert_parallel: true,
            ..tp4
        };
        let w = |k: &Knobs| weights_per_gpu(&t, k, gpu, Engine::Vllm) as i64;
        let experts = 48 * 128 * 3 * 2048 * 768 * 2i64;
        assert!(
            (w(&tp4) - w(&ep) - (experts / 4 - experts / 8)).abs() <= 1,
            "{}",
            w(&tp4) - w(&ep)
        );
        // DP alone replicates the TP group: the same bytes per GPU as TP 4.
        assert_eq!(w(&tp4), w(&Knobs { dp: 1, ..tp4 }));
    }

    /// SGLang's DP attention runs attention TP over tp / dp GPUs: at TP 8, DP 4 each GPU keeps
    /// 2 of Qwen3-30B-A3B's 4 KV heads instead of one (replicated) head.
    #[test]
    fn dp_attention_splits_the_kv_heads_tp_over_dp_ways() {
        let t = model("qwen3-30b-a3b");
        let tp8 = Knobs {
            tp: 8,
            ..Knobs::default()
        };
        let dpa = Knobs {
            dp: 4,
            dp_attention: true,
            ..tp8
        };
        assert_eq!(kv_bytes_per_token(&t, &tp8), 48 * 2 * 128 * 2);
        assert_eq!(kv_bytes_per_token(&t, &dpa), 48 * 2 * 2 * 128 * 2);
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        assert!(capacity(&t, gpu, Engine::Sglang, &dpa).is_ok());
        for bad in [
            Knobs { dp: 3, ..dpa },
            Knobs { ep: 3, ..tp8 },
            Knobs { dp: 1, ..dpa },
        ] {
            assert!(capacity(&t, gpu, Engine::Sglang, &bad).is_err(), "{bad:?}");
        }
        let dense = llama3();
        assert!(capacity(
            &dense,
            gpu,
            Engine::Vllm,
            &Knobs {
                expert_parallel: true,
                ..Knobs::default()
            }
        )
        .is_err());
    }

    /// vLLM 0.8-0.10 falls back to V0 on a GPU of compute capability below 8.0
    /// (`_is_v1_supported_oracle`): a V100 runs V0's profile (one batch of max_model_len tokens,
    /// the sampler's sort) and says so; from 0.11 there is no V0.
    #[test]
    fn vllm_0_8_on_a_v100_falls_back_to_v0() {
        let t = llama3();
        let v100 = vram_model::gpu::lookup("v100-32g").unwrap();
        let k = Knobs {
            max_model_len: Some(4096),
            engine_version: Some([0, 8, 5]),
            ..Knobs::default()
        };
        let c = capacity(&t, v100, Engine::Vllm, &k).unwrap();
        assert_eq!(
            c.log[0],
            "Compute Capability < 8.0 is not supported by the V1 Engine. Falling back to V0."
        );
        assert_eq!((c.max_num_seqs, c.max_num_batched_tokens), (256, 4096));
        let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
        let v1 = capacity(&t, h100, Engine::Vllm, &k).unwrap();
        assert!(!v1.log[0].contains("Falling back"));
        let late = capacity(
            &t,
            v100,
            Engine::Vllm,
            &Knobs {
                engine_version: Some([0, 11, 0]),
                ..k
            },
        )
        .unwrap();
        assert!(late.log.iter().all(|l| !l.contains("Falling back")));
    }

    /// vLLM 0.10.1 lays gpt-oss-120b's MXFP4 experts out for Marlin on an H100 (torch 2.7):
    /// hidden 2880 padded to 3072, intermediate 2880 to 2944; 36 layers × 128 experts × 3
    /// matrices at 0.5 + 1/32 bytes an element. From 0.11 the Triton layout pads nothing here.
    #[test]
    fn mxfp4_marlin_layout_pads_the_experts() {
        let t = model("gpt-oss-120b");
        let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
        let k = Knobs {
            engine_version: Some([0, 10, 1]),
            ..Knobs::default()
        };
        let marlin = weights_per_gpu(&t, &k, h100, Engine::Vllm);
        let triton = weights_per_gpu(
            &t,
            &Knobs {
                engine_version: Some([0, 14, 1]),
                ..k
            },
            h100,
            Engine::Vllm,
        );
        let per_layer = (128 * 3 * (3072 * 2944 - 2880 * 2880)) as f64 * (0.5 + 1.0 / 32.0);
        assert_eq!(marlin - triton, per_layer as u64 * 36);
        // SGLang is not vLLM: no vLLM layout.
        assert_eq!(weights_per_gpu(&t, &k, h100, Engine::Sglang), triton);
    }
}
