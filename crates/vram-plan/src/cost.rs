//! The time model: how long one optimizer step of a configuration takes.
//!
//! Compute is priced for the [`Stack`] in the [`Config`]: under [`Stack::Megatron`] by the
//! closed form below (Megatron-LM's fused kernels, calibrated on A100s); under
//! [`Stack::Transformers`] by [`crate::eager`] (PyTorch eager as transformers 5.x launches it,
//! from H100 measurements). The communication, bubble and offload terms are shared; the
//! optimizer step follows [`Config::optimizer`] under both.
//!
//! # FLOPs
//! Counted per token from the model's shapes, as Megatron-LM counts them (Narayanan et al.
//! 2021, appendix: `F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))` for GPT): every matrix multiply
//! costs `2·m·n·k`, the attention core `4·s·(a·d)` per token and layer in forward (scores and
//! weighted sum, causal masking not subtracted), the LM head `2·h·V` per token. Backward costs
//! twice the forward; recomputation adds a forward of the recomputed part. *Model* FLOPs (for
//! MFU) count no recomputation; *hardware* FLOPs (for TFLOP/s per GPU) count it.
//!
//! # Efficiency curve
//! A GEMM of shape `m × n × k` runs at `peak · η_max · g(m)·g(n)·g(k)` with
//! `g(d) = d / (d + d₀)`; for a transformer layer `m` is the micro-batch's tokens, `n` the
//! hidden size and `k` the narrower of the attention width and the MLP width divided by the
//! TP degree. The saturating form is the arithmetic-intensity/tile-quantisation behaviour of
//! NVIDIA's "Matrix Multiplication Background User's Guide" (throughput climbs with each
//! dimension and flattens past a few thousand). `d₀ = 96` makes a 768-wide GEMM (h/t of GPT-18B
//! on 8-way TP) lose about 11 %. `η_max = 0.75` (234 of the A100's 312 TFLOP/s) is in the
//! range cuBLAS reaches on large bf16 GEMMs in practice (about 225–250 TFLOP/s); it was set
//! from 0.72 to 0.75 after comparing with Megatron-LM's Table 1, so that table checks the
//! shape of the curve and the communication terms across its four rows, not `η_max` itself
//! (figures in BENCHMARKS.md). The model was calibrated on A100s only; on H100s it probably
//! overstates MFU. The attention core runs at `η_max·g(d_head)·g(s)` on the eager path and at
//! 0.6 of peak fused (FlashAttention-2 reports 50–73 % of A100 peak). Element-wise kernels
//! (norms, GeLU, dropout, bias-add, eager softmax over `s²` scores) are memory-bound: their
//! bytes divided by 80 % of HBM bandwidth.
//!
//! # Communication
//! Ring collectives on `n` ranks move `2(n−1)/n` (all-reduce) or `(n−1)/n` (reduce-scatter,
//! all-gather) of the buffer at the group's bus bandwidth ([`crate::cluster`]) plus 10 µs of
//! latency. Tensor parallelism: 2 all-reduces (or all-gather + reduce-scatter under sequence
//! parallelism, the same bytes) of the `b·s·h` activation per layer in forward, 2 in backward,
//! 2 more when the layer is recomputed in full; not overlapped (Megatron-LM 2021). Pipeline:
//! a forward and a backward send of the stage boundary per micro-batch and model chunk,
//! scattered over the TP ranks. Data parallel: gradients are all-reduced (ZeRO-1/2:
//! reduce-scattered, then parameters all-gathered) once a step and overlapped with the last
//! micro-batch's backward when [`Calibration::overlap_grad_reduce`]; ZeRO-3 gathers the
//! parameters in forward and backward and reduce-scatters gradients every micro-batch, hidden
//! behind that micro-batch's compute as far as it goes.
//!
//! # Pipeline bubble
//! GPipe and 1F1B: `(p−1)` stage-times of idle per step; interleaved with `v` chunks:
//! `(p−1)/v` (Narayanan et al. 2021, §2.2).
//!
//! # Offload
//! Optimizer offload moves the GPU's gradient shard down and its half-precision parameter shard
//! up over PCIe each step and runs Adam on the CPU (assumed 2·10⁹ parameters/s per node shared
//! by its GPUs: an assumption of this model, of the order of DeepSpeed's CPU-Adam); parameter
//! offload also fetches the parameter shard twice per micro-batch. Not overlapped.

use serde::Serialize;
use vram_model::arch::{Layout, Transformer};
use vram_model::setup::{AmpStyle, Attention, Offload, Optimizer, Precision, Recompute, Schedule};

use crate::cluster::Cluster;
use crate::eager::{self, EagerCalibration, Stack};

/// The transformers stack's price of one micro-batch (see [`micro_batch_of`]).
pub type MicroBatchPrice = eager::MicroBatch;

/// The tunable constants of the time model (see the module docs for their sources).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// Best fraction of the tensor-core peak a large GEMM reaches.
    pub eta_max: f64,
    /// Half-saturation size of a GEMM dimension.
    pub d0: f64,
    /// Fraction of peak a fused attention kernel reaches.
    pub flash_eta: f64,
    /// Fraction of HBM bandwidth element-wise kernels reach.
    pub hbm_eta: f64,
    /// Latency of one collective, seconds.
    pub collective_latency_s: f64,
    /// Gradient reduction overlaps the last micro-batch's backward (PyTorch DDP, FSDP,
    /// DeepSpeed, Megatron-LM `--overlap-grad-reduce`). Megatron-LM 2021 did not overlap.
    pub overlap_grad_reduce: bool,
    /// CPU Adam throughput per node, parameters per second (offload).
    pub cpu_adam_params_per_s: f64,
    /// Constants of the transformers stack ([`crate::eager`]).
    pub eager: EagerCalibration,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            eta_max: 0.75,
            d0: 96.0,
            flash_eta: 0.6,
            hbm_eta: 0.8,
            collective_latency_s: 10e-6,
            overlap_grad_reduce: true,
            cpu_adam_params_per_s: 2e9,
            eager: EagerCalibration::default(),
        }
    }
}

/// FLOPs of a transformer per token, forward only, by part.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenFlops {
    /// Matrix multiplies of one layer (active experts only).
    pub layer_matmul: f64,
    /// Attention core (`QKᵀ` and `·V`) of one layer at the given sequence length.
    pub layer_attention: f64,
    /// The LM head (0 for encoder-only models).
    pub head: f64,
    /// Layers (encoder and decoder together).
    pub layers: u64,
}

impl TokenFlops {
    /// Forward FLOPs per token of the whole model.
    pub fn forward(&self) -> f64 {
        self.layers as f64 * (self.layer_matmul + self.layer_attention) + self.head
    }
    /// Model FLOPs per token of a training step (forward + backward, no recomputation).
    pub fn train(&self) -> f64 {
        3.0 * self.forward()
    }
}

/// Forward FLOPs per token of `t` at sequence length `seq`.
///
/// For GPT (`a·d = h`, `f = 4h`, untied or tied head) this is `24h² + 4sh` per layer and
/// `2hV` for the head, so that `3 × forward + recomputed forward` reproduces Megatron-LM's
/// `96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))` per token.
pub fn token_flops(t: &Transformer, seq: u64) -> TokenFlops {
    // One representative layer (`Blocks::typical`): the closed form's shape.
    let ty = t.blocks.typical();
    let h = t.hidden() as f64;
    let (q, kv) = ty.attn_widths();
    let (q, kv) = (q as f64, kv as f64);
    let f = ty.intermediate as f64;
    let attn_mm = h * (q + 2.0 * kv) + q * h;
    let mlp_one = if ty.gated { 3.0 * h * f } else { 2.0 * h * f };
    let (active, router) = if ty.experts > 1 {
        (ty.top_k.max(1) as f64, h * ty.experts as f64)
    } else {
        (1.0, 0.0)
    };
    let layer_matmul = 2.0 * (attn_mm + active * mlp_one + router);
    let layer_attention = 4.0 * seq as f64 * q;
    let head = if t.layout() == Layout::EncoderOnly {
        0.0
    } else {
        2.0 * h * t.vocab() as f64
    };
    TokenFlops {
        layer_matmul,
        layer_attention,
        head,
        layers: t.layers(),
    }
}

/// One configuration the time model prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline-parallel degree.
    pub pp: u64,
    /// Data-parallel degree.
    pub dp: u64,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Micro-batches per step on each data-parallel rank.
    pub grad_accum: u64,
    /// ZeRO stage.
    pub zero: u8,
    /// Offload.
    pub offload: Offload,
    /// Recompute kind.
    pub recompute: Recompute,
    /// Layers of each stage recomputed (all when `None`).
    pub recompute_layers: Option<u64>,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// Pipeline schedule.
    pub schedule: Schedule,
    /// Mixed-precision layout in force (decides gradient bytes).
    pub amp_style: AmpStyle,
    /// Precision.
    pub precision: Precision,
    /// The software that runs the step.
    pub stack: Stack,
    /// The optimizer.
    pub optimizer: Optimizer,
}

/// Bytes a fused GPU optimizer step moves per parameter under Megatron-LM (fp32 master
/// weights and states, fp32 main gradient, half parameter written back): Adam reads and
/// writes the master weight and two states and reads the gradient (28), writes the half
/// copy (2), plus its read-modify of the step's scalars: 36 as before; SGD 4 + 4 + 4 + 2 = 14;
/// momentum adds its buffer read and written (22); Adafactor's factored second moment is
/// small, but it reads the gradient twice more (22); 8-bit Adam's states are 1 byte (18).
fn megatron_optimizer_bytes(opt: Optimizer) -> f64 {
    match opt {
        Optimizer::Adamw => 36.0,
        Optimizer::Sgd => 14.0,
        Optimizer::Momentum | Optimizer::Adafactor => 22.0,
        Optimizer::Adam8bit => 18.0,
    }
}

/// Where the step's time goes, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct StepTime {
    /// Forward and backward compute without recomputation, all micro-batches.
    pub compute_s: f64,
    /// Recomputation.
    pub recompute_s: f64,
    /// Tensor-parallel and pipeline point-to-point communication on the critical path.
    pub model_comm_s: f64,
    /// Data-parallel / ZeRO communication not hidden behind compute.
    pub dp_comm_s: f64,
    /// Pipeline bubble.
    pub bubble_s: f64,
    /// Optimizer step (on GPU or CPU).
    pub optimizer_s: f64,
    /// Host↔device transfers for offload.
    pub offload_s: f64,
    /// The whole step.
    pub total_s: f64,
    /// Hardware FLOPs of the step over all GPUs (recomputation counted).
    pub hardware_flops: f64,
    /// Model FLOPs of the step over all GPUs (no recomputation).
    pub model_flops: f64,
}

fn g(d: f64, d0: f64) -> f64 {
    d / (d + d0)
}

/// Prices one step of `cfg` for `t` on `cluster`.
pub fn step_time(
    t: &Transformer,
    cluster: &Cluster,
    cal: &Calibration,
    attention: Attention,
    seq: u64,
    cfg: &Config,
) -> StepTime {
    let mb = micro_batch_of(t, cluster, cal, attention, seq, cfg);
    step_time_with(t, cluster, cal, attention, seq, cfg, mb.as_ref())
}

/// The transformers stack's price of one micro-batch of `cfg` (`None` under Megatron-LM).
/// It depends only on the micro-batch, tensor parallelism, sequence parallelism, precision
/// and mixed-precision layout, so the search computes it once per such combination.
pub fn micro_batch_of(
    t: &Transformer,
    cluster: &Cluster,
    cal: &Calibration,
    attention: Attention,
    seq: u64,
    cfg: &Config,
) -> Option<eager::MicroBatch> {
    (cfg.stack == Stack::Transformers).then(|| {
        eager::micro_batch(
            t,
            cluster.gpu,
            &cal.eager,
            attention,
            cfg.precision,
            cfg.amp_style,
            (cfg.micro_batch * seq) as f64,
            seq as f64,
            cfg.tp as f64,
            cfg.sequence_parallel,
        )
    })
}

/// [`step_time`] with the transformers stack's micro-batch already priced
/// ([`micro_batch_of`]; ignored under Megatron-LM).
pub fn step_time_with(
    t: &Transformer,
    cluster: &Cluster,
    cal: &Calibration,
    attention: Attention,
    seq: u64,
    cfg: &Config,
    eager_mb: Option<&eager::MicroBatch>,
) -> StepTime {
    let precision = cfg.precision;
    let tf = token_flops(t, seq);
    let peak = 1e12
        * if precision == Precision::Fp32 {
            cluster.gpu.fp32_tflops
        } else {
            cluster.gpu.half_tflops
        };
    let hbm = cluster.gpu.hbm_gb_s * 1e9 * cal.hbm_eta;
    let bytes = precision.compute_bytes() as f64;
    let (tp, pp) = (cfg.tp as f64, cfg.pp as f64);
    let tokens = (cfg.micro_batch * seq) as f64;
    let ty = t.blocks.typical();
    let h = t.hidden() as f64;
    let (q, _) = ty.attn_widths();
    let q = q as f64;
    let head_dim = ty.head_dim as f64;

    // --- one layer, one micro-batch, forward (seconds) ---
    let eta_mm = cal.eta_max
        * g(tokens, cal.d0)
        * g(h, cal.d0)
        * g((q.min(ty.intermediate as f64)) / tp, cal.d0);
    let mm_f = tokens * tf.layer_matmul / tp / (peak * eta_mm);
    let attn_eta = match attention {
        Attention::Eager => cal.eta_max * g(head_dim, cal.d0) * g(seq as f64, cal.d0),
        Attention::Sdpa => cal.flash_eta,
    };
    let attn_f = tokens * tf.layer_attention / tp / (peak * attn_eta);
    // Element-wise bytes per token in forward, with Megatron-LM's fused kernels: 2 norms
    // (read + write h), 2 bias-dropout-adds (read 2h, write h, 1-byte mask), bias-GeLU (read +
    // write f, inside the TP region); the rest is sharded only by sequence parallelism.
    let sp_div = if cfg.sequence_parallel { tp } else { 1.0 };
    let elem_bytes = 2.0 * ty.intermediate as f64 * bytes / tp
        + (4.0 * h * bytes + h * (6.0 * bytes + 2.0)) / sp_div;
    let mut elem_f = tokens * elem_bytes / hbm;
    let mut softmax_f = 0.0;
    if attention == Attention::Eager {
        // scale-mask-softmax read+write, dropout read+write+mask: ~5 elements per score.
        softmax_f = tokens * 5.0 * (ty.heads as f64 / tp) * seq as f64 * bytes / hbm;
        elem_f += softmax_f;
    }
    let mut fwd = mm_f + attn_f + elem_f;
    let mut bwd = 2.0 * fwd;
    let mut attn_core = attn_f + softmax_f;
    let mut eager_head = None;
    let mut tensors_per_param = 0.0;
    if let (Stack::Transformers, Some(mb)) = (cfg.stack, eager_mb) {
        tensors_per_param = mb.tensors_per_param;
        fwd = mb.layer_fwd_s;
        bwd = mb.layer_bwd_s;
        attn_core = mb.layer_attn_s;
        eager_head = Some(mb.head_s);
    }
    let lat = cal.collective_latency_s;
    let tp_ar = if cfg.tp > 1 {
        2.0 * (tp - 1.0) / tp * tokens * h * bytes / (cluster.intra_gb_s * 1e9) + lat
    } else {
        0.0
    };
    let layer_comm = 4.0 * tp_ar;
    let recompute_one = match cfg.recompute {
        Recompute::None => 0.0,
        Recompute::Selective => attn_core,
        Recompute::Full => fwd + 2.0 * tp_ar,
    };

    // --- one stage (the last, which also holds the head), one micro-batch ---
    let layers = tf.layers as f64;
    let per_stage = (layers / pp).ceil();
    let recomputed_layers = match (cfg.recompute, cfg.recompute_layers) {
        (Recompute::None, _) => 0.0,
        (_, Some(k)) => (k as f64).min(per_stage),
        (_, None) => per_stage,
    };
    let head_f = if let Some(head) = eager_head {
        head
    } else if tf.head > 0.0 {
        let mm = tokens * tf.head / tp / (peak * cal.eta_max * g(tokens, cal.d0) * g(h, cal.d0));
        // logits, fp32 upcast, softmax, and their gradients: ~16 bytes per logit.
        let loss = tokens * t.vocab() as f64 / tp * 16.0 / hbm;
        3.0 * mm + loss
    } else {
        0.0
    };
    let compute_mb = per_stage * (fwd + bwd) + head_f;
    let recompute_mb = recomputed_layers * recompute_one;
    let comm_mb = per_stage * layer_comm;
    let (v, p2p_mb) = if cfg.pp > 1 {
        let v = match cfg.schedule {
            Schedule::Interleaved(v) => v as f64,
            _ => 1.0,
        };
        let bw = cluster.group_gb_s(2, cfg.tp * cfg.dp) * 1e9;
        let boundary = tokens * h * bytes / tp;
        (v, 2.0 * v * (boundary / bw + lat))
    } else {
        (1.0, 0.0)
    };
    let stage_mb = compute_mb + recompute_mb + comm_mb + p2p_mb;
    let m = cfg.grad_accum as f64;
    let bubble = (pp - 1.0) / v * stage_mb;

    // --- data parallel ---
    let split = t.param_split();
    let stage_params = per_stage * split.per_layer as f64 / tp
        + (split.embedding.max(split.head)) as f64 / tp
        + if cfg.pp == 1 {
            split.embedding.min(split.head) as f64 / tp
        } else {
            0.0
        };
    let dp = cfg.dp as f64;
    // PyTorch DDP under autocast reduces fp32 gradients; Megatron-LM reduces in the half type
    // unless `--accumulate-allreduce-grads-in-fp32` (off by default for fp16); DeepSpeed
    // reduces half gradients.
    let grad_bytes = match cfg.amp_style {
        AmpStyle::Autocast => 4.0,
        AmpStyle::Megatron | AmpStyle::DeepSpeed => bytes,
    };
    let dp_bw = cluster.group_gb_s(cfg.dp, cfg.tp) * 1e9;
    let frac = (dp - 1.0) / dp;
    let mut dp_comm = 0.0;
    if cfg.dp > 1 {
        match cfg.zero {
            0 => dp_comm = 2.0 * frac * stage_params * grad_bytes / dp_bw + lat,
            1 | 2 => {
                dp_comm = frac * stage_params * (grad_bytes + bytes) / dp_bw + 2.0 * lat;
            }
            _ => {
                // Per micro-batch: all-gather (forward), all-gather (backward), reduce-scatter.
                let per_mb = frac * stage_params * (2.0 * bytes + grad_bytes) / dp_bw
                    + 3.0 * per_stage * lat;
                let hidden = 0.9 * (compute_mb + recompute_mb);
                dp_comm = m * (per_mb - hidden).max(0.0);
            }
        }
        if cfg.zero < 3 && cal.overlap_grad_reduce {
            dp_comm = (dp_comm - per_stage * bwd).max(0.0);
        }
    }

    // --- optimizer and offload ---
    let shard = if cfg.zero >= 1 {
        stage_params / dp
    } else {
        stage_params
    };
    let pcie = cluster.pcie_gb_s * 1e9;
    let gpu_optimizer = match cfg.stack {
        Stack::Megatron => shard * megatron_optimizer_bytes(cfg.optimizer) / hbm,
        Stack::Transformers => {
            // Optimizer states take the parameters' dtype: bf16 in pure bf16, fp32 masters
            // otherwise (autocast's fp32 weights, DeepSpeed's fp32 partitions).
            let state_bytes = if precision == Precision::Bf16 {
                2.0
            } else {
                4.0
            };
            let tensors = tensors_per_param * shard;
            eager::optimizer_s(
                cluster.gpu,
                &cal.eager,
                cfg.optimizer,
                shard,
                tensors,
                state_bytes,
                precision == Precision::Fp16Amp,
            )
        }
    };
    // Gradient accumulation under PyTorch: each micro-batch after the first adds its
    // gradients into `.grad` (Megatron-LM accumulates inside its fused weight-gradient GEMM).
    let accumulate = if cfg.stack == Stack::Transformers && cfg.grad_accum > 1 {
        let grad_bytes = if precision == Precision::Bf16 {
            2.0
        } else {
            4.0
        };
        let grads = if cfg.zero >= 2 {
            stage_params / dp
        } else {
            stage_params
        };
        (cfg.grad_accum - 1) as f64
            * eager::accumulate_s(cluster.gpu, &cal.eager, grads, grad_bytes)
    } else {
        0.0
    };
    let (optimizer, offload) = match cfg.offload {
        Offload::None => (gpu_optimizer + accumulate, 0.0),
        Offload::Optimizer | Offload::Params => {
            let cpu = shard * cluster.gpus_per_node as f64 / cal.cpu_adam_params_per_s;
            let mut moved = shard * (grad_bytes + bytes) / pcie;
            if cfg.offload == Offload::Params {
                moved += m * 2.0 * shard * bytes / pcie;
            }
            (cpu, moved)
        }
    };

    let steady = m * stage_mb;
    let total = steady + bubble + dp_comm + optimizer + offload;
    let step_tokens = (cfg.micro_batch * cfg.grad_accum * cfg.dp * seq) as f64;
    let model_flops = step_tokens * tf.train();
    let recompute_flops_token = (recomputed_layers * pp).min(layers)
        * match cfg.recompute {
            Recompute::None => 0.0,
            Recompute::Selective => tf.layer_attention,
            Recompute::Full => tf.layer_matmul + tf.layer_attention,
        };
    StepTime {
        compute_s: m * compute_mb,
        recompute_s: m * recompute_mb,
        model_comm_s: m * (comm_mb + p2p_mb),
        dp_comm_s: dp_comm,
        bubble_s: bubble,
        optimizer_s: optimizer,
        offload_s: offload,
        total_s: total,
        hardware_flops: model_flops + step_tokens * recompute_flops_token,
        model_flops,
    }
}
