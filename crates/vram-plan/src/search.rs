//! The search: every configuration of the space, priced, checked for memory best-first.
//!
//! Pricing a configuration ([`crate::cost::step_time`]) takes well under a microsecond; the
//! memory estimate a few. So all candidates are priced, put in a min-heap by step time, and
//! popped in order; a popped candidate's memory is estimated and it is kept if it fits. The
//! search stops when `top` plans fit, so the memory model runs only on configurations that
//! could be among the best. "Optimal" recomputation enters the heap priced as no
//! recomputation (a lower bound); when popped, the smallest number of recomputed layers per
//! stage that fits is found by bisection (memory falls as layers are recomputed) and the
//! candidate goes back into the heap at its true price. A micro-batch size that does not fit
//! rules out larger ones with the same other dimensions.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::{Serialize, Serializer};
use vram_model::arch::{Model, Transformer};
use vram_model::setup::{
    AmpStyle, Attention, Mode, Offload, Optimizer, Overheads, Parallel, Precision, Recompute,
    Schedule, Setup, Train,
};

use crate::cluster::Cluster;
use crate::cost::{self, Calibration, Config, StepTime};
use crate::eager::Stack;
use crate::error::{Error, Result};

/// How recomputation may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecomputeChoice {
    /// No recomputation.
    None,
    /// Attention core only (Korthikanti et al. 2022).
    Selective,
    /// Every layer in full.
    Full,
    /// The fewest layers per stage recomputed in full that make the plan fit.
    Optimal,
}

/// Dimensions the user fixed; `None` means searched.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pins {
    /// Tensor-parallel degree.
    pub tp: Option<u64>,
    /// Pipeline-parallel degree.
    pub pp: Option<u64>,
    /// Data-parallel degree.
    pub dp: Option<u64>,
    /// Micro-batch size.
    pub micro_batch: Option<u64>,
    /// Recomputation.
    pub recompute: Option<RecomputeChoice>,
    /// ZeRO stage.
    pub zero: Option<u8>,
    /// Offload.
    pub offload: Option<Offload>,
    /// Sequence parallelism.
    pub sequence_parallel: Option<bool>,
    /// Pipeline schedule.
    pub schedule: Option<Schedule>,
}

/// Everything a search needs.
#[derive(Debug, Clone)]
pub struct Request {
    /// The model (a transformer).
    pub model: Model,
    /// The cluster.
    pub cluster: Cluster,
    /// Sequences per optimizer step over the whole job.
    pub global_batch: u64,
    /// Sequence length.
    pub seq: u64,
    /// Precisions to search (at least one). [`Request::new`] puts only the GPU's
    /// mixed-precision default here: searching pure bf16 against bf16 AMP would always pick
    /// pure bf16 for its memory, a change of numerics the user has to choose.
    pub precisions: Vec<Precision>,
    /// Attention implementation.
    pub attention: Attention,
    /// Optimizer (memory and time).
    pub optimizer: Optimizer,
    /// The software that runs the step (decides which kernels are priced).
    /// [`Request::new`] puts [`Stack::Transformers`]: Hugging Face models under PyTorch,
    /// what DeepSpeed, accelerate and torchrun launch.
    pub stack: Stack,
    /// Memory overheads for the estimator.
    pub overheads: Overheads,
    /// Pinned dimensions.
    pub pins: Pins,
    /// How many fitting plans to return.
    pub top: usize,
    /// Time-model constants.
    pub calibration: Calibration,
}

impl Request {
    /// A request with the CLI's defaults: bf16 mixed precision (fp16 on GPUs without bf16),
    /// fused attention, AdamW, default overheads, nothing pinned, 10 plans.
    pub fn new(model: Model, cluster: Cluster, global_batch: u64, seq: u64) -> Request {
        let precision = Precision::Bf16Amp.on(cluster.gpu);
        Request {
            model,
            cluster,
            global_batch,
            seq,
            precisions: vec![precision],
            attention: Attention::Sdpa,
            optimizer: Optimizer::Adamw,
            stack: Stack::Transformers,
            overheads: Overheads::default(),
            pins: Pins::default(),
            top: 10,
            calibration: Calibration::default(),
        }
    }
}

/// What limits a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// Useful compute dominates: overheads are under 15 % of the step each.
    Compute,
    /// Tensor-parallel, pipeline or data-parallel communication.
    Communication,
    /// The pipeline bubble.
    Bubble,
    /// Time spent because memory is short: recomputation and offload transfers.
    Memory,
}

fn ser_schedule<S: Serializer>(s: &Schedule, ser: S) -> std::result::Result<S::Ok, S::Error> {
    ser.serialize_str(&schedule_name(*s))
}

/// `gpipe`, `1f1b` or `interleaved-v`.
pub fn schedule_name(s: Schedule) -> String {
    match s {
        Schedule::Gpipe => "gpipe".into(),
        Schedule::OneFOneB => "1f1b".into(),
        Schedule::Interleaved(v) => format!("interleaved-{v}"),
    }
}

/// One configuration with its predicted speed and memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
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
    pub zero_stage: u8,
    /// Offload.
    pub offload: Offload,
    /// Recomputation (`full` with `recompute_layers` set: that many layers per stage).
    pub recompute: Recompute,
    /// Layers per stage recomputed; `None` means all (or none, with `recompute: none`).
    pub recompute_layers: Option<u64>,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// Pipeline schedule.
    #[serde(serialize_with = "ser_schedule")]
    pub schedule: Schedule,
    /// Precision.
    pub precision: Precision,
    /// Mixed-precision layout (which engine's memory layout was assumed).
    pub amp_style: AmpStyle,
    /// Predicted seconds per optimizer step.
    pub step_time_s: f64,
    /// Tokens per second over the job.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation (no recomputation counted).
    pub mfu: f64,
    /// Hardware TFLOP/s per GPU (recomputation counted, as Megatron-LM reports).
    pub tflops_per_gpu: f64,
    /// Estimated memory per GPU (the pipeline stage that holds the most), bytes, overheads
    /// included; what is compared with the GPU's memory.
    pub peak_bytes_per_gpu: u64,
    /// What limits it.
    pub bound: Bound,
    /// Where the time goes.
    pub time: StepTime,
}

impl Plan {
    /// One-line description of the configuration, e.g. `tp8 pp8 dp24 mb1x96 zero1 1f1b full`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "tp{} pp{} dp{} mb{}x{}",
            self.tp, self.pp, self.dp, self.micro_batch, self.grad_accum
        );
        if self.zero_stage > 0 {
            s += &format!(" zero{}", self.zero_stage);
        }
        s += match self.precision {
            Precision::Bf16Amp | Precision::Fp16Amp => "",
            Precision::Bf16 => " pure-bf16",
            Precision::Fp32 => " fp32",
        };
        if self.offload != Offload::None {
            s += &format!(
                " offload-{}",
                if self.offload == Offload::Params {
                    "params"
                } else {
                    "opt"
                }
            );
        }
        if self.sequence_parallel {
            s += " sp";
        }
        if self.pp > 1 {
            s += &format!(" {}", schedule_name(self.schedule));
        }
        s += match self.recompute {
            Recompute::None => "",
            Recompute::Selective => " rc-sel",
            Recompute::Full => " rc-full",
        };
        if let (Recompute::Full, Some(k)) = (self.recompute, self.recompute_layers) {
            s += &format!(":{k}");
        }
        s
    }
}

/// Progress of a search, reported to the caller's callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Candidates examined.
    pub done: u64,
    /// Candidates in the space (an upper bound on `done`).
    pub total: u64,
}

/// The answer of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Fitting plans, fastest first (at most `top`).
    pub plans: Vec<Plan>,
    /// When nothing fits: the configuration that came closest (least memory per GPU).
    pub closest: Option<Plan>,
    /// When nothing fits: what would make it fit, one suggestion per line.
    pub suggestions: Vec<String>,
    /// Configurations priced.
    pub candidates: u64,
    /// Memory estimates run.
    pub estimates: u64,
}

#[derive(Debug, Clone, Copy)]
struct Cand {
    cfg: Config,
    choice: RecomputeChoice,
    /// Memory already known (resolved optimal candidates).
    mem: Option<u64>,
    /// Whether `mem` comes from the allocator replay (else from allocated bytes alone).
    confirmed: bool,
}

/// Divisors of `n` in increasing order.
fn divisors(n: u64) -> Vec<u64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut i = 1;
    while i * i <= n {
        if n % i == 0 {
            small.push(i);
            if i * i != n {
                large.push(n / i);
            }
        }
        i += 1;
    }
    large.reverse();
    small.extend(large);
    small
}

fn transformer(model: &Model) -> Result<&Transformer> {
    match model {
        Model::Transformer(t) => Ok(t),
        other => Err(Error::NotTransformer {
            what: "vram plan",
            model: other.name().to_string(),
        }),
    }
}

fn pinned<T: Copy + PartialEq>(pin: Option<T>, v: T) -> bool {
    pin.is_none_or(|p| p == v)
}

/// Every candidate of the space that passes the cheap structural checks.
fn candidates(req: &Request, t: &Transformer) -> Result<Vec<Cand>> {
    let c = &req.cluster;
    let pins = &req.pins;
    let layers = t.layers();
    let mut out = Vec::new();
    for tp in divisors(c.gpus_per_node) {
        let ty = t.blocks.typical();
        if !pinned(pins.tp, tp) || c.gpus % tp != 0 || ty.heads % tp != 0 {
            continue;
        }
        if ty.kv_heads % tp != 0 && tp % ty.kv_heads != 0 {
            continue;
        }
        // A Hugging Face model's tensor parallelism (transformers' tensor-parallel plan,
        // DeepSpeed's AutoTP) splits whole key-value heads: Megatron-LM alone replicates them
        // for tp above their count (`emit::native_tp_rules`, `emit::autotp_rules`).
        if req.stack != Stack::Megatron && ty.kv_heads % tp != 0 {
            continue;
        }
        for pp in divisors(c.gpus / tp) {
            if !pinned(pins.pp, pp) || layers % pp != 0 || (pp > 1 && !req.stack.pipeline()) {
                continue;
            }
            let dp = c.gpus / tp / pp;
            if !pinned(pins.dp, dp) || req.global_batch % dp != 0 {
                continue;
            }
            let per_rank = req.global_batch / dp;
            let schedules: Vec<Schedule> = if pp == 1 {
                vec![Schedule::OneFOneB]
            } else {
                // GPipe has 1F1B's bubble and holds every micro-batch's activations instead
                // of at most p: it never wins, so it is searched only when pinned (and its
                // peak walk grows with the micro-batch count).
                let mut v = vec![Schedule::OneFOneB];
                if pins.schedule == Some(Schedule::Gpipe) {
                    v.push(Schedule::Gpipe);
                }
                for chunks in [2, 3, 4, 6, 8] {
                    if layers % (pp * chunks) == 0 {
                        v.push(Schedule::Interleaved(chunks));
                    }
                }
                v
            };
            for mb in divisors(per_rank) {
                if !pinned(pins.micro_batch, mb) {
                    continue;
                }
                let ga = per_rank / mb;
                for &schedule in &schedules {
                    if pp > 1 && !pinned(pins.schedule, schedule) {
                        continue;
                    }
                    if let Schedule::Interleaved(_) = schedule {
                        // Megatron-LM needs the micro-batch count to be a multiple of pp.
                        if ga % pp != 0 {
                            continue;
                        }
                    }
                    for sp in [false, true] {
                        if (sp && (tp == 1 || !req.stack.partial_recompute()))
                            || !pinned(pins.sequence_parallel, sp)
                        {
                            continue;
                        }
                        for zero in 0..=3u8 {
                            // DeepSpeed and Megatron-LM pipelines take ZeRO-1 at most.
                            if !pinned(pins.zero, zero) || (pp > 1 && zero > 1) {
                                continue;
                            }
                            for offload in [Offload::None, Offload::Optimizer, Offload::Params] {
                                if !pinned(pins.offload, offload)
                                    || (offload != Offload::None && zero == 0)
                                    || (offload == Offload::Params && zero != 3)
                                    || (dp == 1 && zero > 0 && offload == Offload::None)
                                {
                                    continue;
                                }
                                for &precision in &req.precisions {
                                    for choice in [
                                        RecomputeChoice::None,
                                        RecomputeChoice::Selective,
                                        RecomputeChoice::Full,
                                        RecomputeChoice::Optimal,
                                    ] {
                                        if !pinned(pins.recompute, choice) {
                                            continue;
                                        }
                                        if choice == RecomputeChoice::Optimal && layers / pp < 2 {
                                            continue;
                                        }
                                        // A Hugging Face model recomputes every layer or none.
                                        if !req.stack.partial_recompute()
                                            && matches!(
                                                choice,
                                                RecomputeChoice::Selective
                                                    | RecomputeChoice::Optimal
                                            )
                                        {
                                            continue;
                                        }
                                        let (recompute, recompute_layers) = match choice {
                                            RecomputeChoice::None | RecomputeChoice::Optimal => {
                                                (Recompute::None, None)
                                            }
                                            RecomputeChoice::Selective => {
                                                (Recompute::Selective, None)
                                            }
                                            RecomputeChoice::Full => (Recompute::Full, None),
                                        };
                                        let parallel = Parallel {
                                            dp,
                                            tp,
                                            pp,
                                            sequence_parallel: sp,
                                            zero,
                                            schedule,
                                        };
                                        let setup = Setup {
                                            parallel,
                                            ..Setup::default()
                                        };
                                        out.push(Cand {
                                            cfg: Config {
                                                tp,
                                                pp,
                                                dp,
                                                micro_batch: mb,
                                                grad_accum: ga,
                                                zero,
                                                offload,
                                                recompute,
                                                recompute_layers,
                                                sequence_parallel: sp,
                                                schedule,
                                                // Megatron-LM holds its own layout (half
                                                // weights, fp32 main gradients) whatever the
                                                // parallel layout; the others follow it.
                                                amp_style: if req.stack == Stack::Megatron {
                                                    AmpStyle::Megatron
                                                } else {
                                                    setup.amp_style()
                                                },
                                                precision,
                                                stack: req.stack,
                                                optimizer: req.optimizer,
                                            },
                                            choice,
                                            mem: None,
                                            confirmed: false,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

fn setup_of(req: &Request, cfg: &Config) -> Setup {
    Setup {
        precision: cfg.precision,
        attention: req.attention,
        parallel: Parallel {
            dp: cfg.dp,
            tp: cfg.tp,
            pp: cfg.pp,
            sequence_parallel: cfg.sequence_parallel,
            zero: cfg.zero,
            schedule: cfg.schedule,
        },
        overheads: req.overheads,
        mode: Mode::Train(Train {
            micro_batch: cfg.micro_batch,
            seq: req.seq,
            grad_accum: cfg.grad_accum,
            optimizer: req.optimizer,
            recompute: cfg.recompute,
            recompute_layers: cfg.recompute_layers,
            offload: cfg.offload,
            amp_style: (req.stack == Stack::Megatron).then_some(AmpStyle::Megatron),
        }),
    }
}

/// Orders positive step times: the bit pattern of a non-negative f64 sorts like the value.
fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

/// What the transformers stack's micro-batch price depends on: micro-batch, tp, sequence
/// parallelism, precision, mixed-precision layout.
type MbKey = (u64, u64, bool, u8, u8);

struct Ctx<'a> {
    req: &'a Request,
    t: &'a Transformer,
    micro_batches: std::cell::RefCell<HashMap<MbKey, Option<cost::MicroBatchPrice>>>,
    estimates: u64,
    replays: u64,
    first_error: Option<vram_model::Error>,
    closest: Option<(u64, Config)>,
}

impl Ctx<'_> {
    fn price(&self, cfg: &Config) -> StepTime {
        let r = self.req;
        let key = (
            cfg.micro_batch,
            cfg.tp,
            cfg.sequence_parallel,
            cfg.precision as u8,
            cfg.amp_style as u8,
        );
        let mb = *self
            .micro_batches
            .borrow_mut()
            .entry(key)
            .or_insert_with(|| {
                cost::micro_batch_of(self.t, &r.cluster, &r.calibration, r.attention, r.seq, cfg)
            });
        cost::step_time_with(
            self.t,
            &r.cluster,
            &r.calibration,
            r.attention,
            r.seq,
            cfg,
            mb.as_ref(),
        )
    }

    /// Total bytes per GPU, or `None` when the memory model rejects the setup.
    fn memory(&mut self, cfg: &Config) -> Option<u64> {
        self.estimates += 1;
        // The peak walk alone (microseconds): reserved bytes are at least the allocated ones,
        // so what this refuses cannot fit. A candidate it accepts is replayed through the
        // allocator (`confirm`) before it becomes a plan.
        let result = vram_model::estimate_allocated(&self.req.model, &setup_of(self.req, cfg));
        self.record(cfg, result)
    }

    /// Total bytes per GPU with the allocator's reserved bytes (milliseconds: only for
    /// candidates about to become plans).
    fn confirm(&mut self, cfg: &Config) -> Option<u64> {
        self.replays += 1;
        let result = vram_model::estimate(&self.req.model, &setup_of(self.req, cfg));
        self.record(cfg, result)
    }

    fn record(
        &mut self,
        cfg: &Config,
        result: vram_model::Result<vram_model::Estimate>,
    ) -> Option<u64> {
        match result {
            Ok(e) => {
                let bytes = e.total_bytes;
                if self.closest.is_none_or(|(b, _)| bytes < b) {
                    self.closest = Some((bytes, *cfg));
                }
                Some(bytes)
            }
            Err(e) => {
                self.first_error.get_or_insert(e);
                None
            }
        }
    }

    fn host_fits(&self, cfg: &Config) -> bool {
        if cfg.offload == Offload::None {
            return true;
        }
        // Offloaded per GPU: fp32 master + optimizer states of its shard (12 B/param for
        // Adam), and the half parameters with parameter offload; the node's GPUs share the
        // host.
        let c = &self.req.cluster;
        let shard = self.t.param_count() as f64 / (cfg.tp * cfg.pp * cfg.dp) as f64;
        // fp32 master weights and the optimizer's fp32 states.
        let states = match self.req.optimizer {
            Optimizer::Sgd => 0.0,
            Optimizer::Momentum => 4.0,
            Optimizer::Adamw => 8.0,
            Optimizer::Adam8bit => 2.0,
            Optimizer::Adafactor => 0.5,
        };
        let per_param = 4.0
            + states
            + if cfg.offload == Offload::Params {
                2.0
            } else {
                0.0
            };
        shard * per_param * c.gpus_per_node as f64 <= c.host_memory_bytes as f64
    }

    fn plan(&self, cfg: &Config, peak: u64) -> Plan {
        let r = self.req;
        let time = self.price(cfg);
        let gpus = (cfg.tp * cfg.pp * cfg.dp) as f64;
        let peak_flops = 1e12
            * if cfg.precision == Precision::Fp32 {
                r.cluster.gpu.fp32_tflops
            } else {
                r.cluster.gpu.half_tflops
            };
        let tokens = (r.global_batch * r.seq) as f64;
        let total = time.total_s;
        let parts = [
            (Bound::Communication, time.model_comm_s + time.dp_comm_s),
            (Bound::Bubble, time.bubble_s),
            (Bound::Memory, time.recompute_s + time.offload_s),
        ];
        let (mut bound, mut worst) = (Bound::Compute, 0.15 * total);
        for (b, s) in parts {
            if s > worst {
                bound = b;
                worst = s;
            }
        }
        Plan {
            tp: cfg.tp,
            pp: cfg.pp,
            dp: cfg.dp,
            micro_batch: cfg.micro_batch,
            grad_accum: cfg.grad_accum,
            zero_stage: cfg.zero,
            offload: cfg.offload,
            recompute: cfg.recompute,
            recompute_layers: cfg.recompute_layers,
            sequence_parallel: cfg.sequence_parallel,
            schedule: cfg.schedule,
            precision: cfg.precision,
            amp_style: cfg.amp_style,
            step_time_s: total,
            tokens_per_s: tokens / total,
            mfu: time.model_flops / (total * gpus * peak_flops),
            tflops_per_gpu: time.hardware_flops / (total * gpus) / 1e12,
            peak_bytes_per_gpu: peak,
            bound,
            time,
        }
    }
}

/// Every dimension of a candidate but the micro-batch: tp, pp, zero, offload, recompute,
/// sequence parallel, schedule, recomputed layers, recompute choice.
type FailKey = (u64, u64, u8, u8, u8, bool, u64, Option<u64>, u8);

/// Fewest layers per stage, in `1..per_stage`, whose full recomputation makes `cfg` fit;
/// `None` when recomputing no layer already fits or even `per_stage - 1` layers do not.
fn fewest_layers(ctx: &mut Ctx<'_>, cfg: &Config, capacity: u64) -> Layers {
    let layers = ctx.t.layers();
    let per_stage = layers / cfg.pp;
    let with = |k: u64| Config {
        recompute: Recompute::Full,
        recompute_layers: Some(k),
        ..*cfg
    };
    // Fits without recomputation: the `none` candidate covers it.
    if ctx.memory(cfg).is_some_and(|m| m <= capacity) {
        return Layers::NotNeeded;
    }
    let top = per_stage - 1;
    let Some(hi_mem) = ctx.memory(&with(top)) else {
        return Layers::Never;
    };
    if hi_mem > capacity {
        return Layers::Never;
    }
    let (mut lo, mut hi, mut best) = (0u64, top, hi_mem); // lo does not fit (k = 0 is "none")
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match ctx.memory(&with(mid)) {
            Some(m) if m <= capacity => {
                hi = mid;
                best = m;
            }
            _ => lo = mid,
        }
    }
    Layers::Fits(hi, best)
}

/// From `cfg`'s recomputed layers (which fit by allocated bytes) up, the fewest whose replayed
/// step fits, with its bytes; a bisection of replays.
fn fewest_layers_replayed(ctx: &mut Ctx<'_>, cfg: &Config, capacity: u64) -> Option<(u64, u64)> {
    let k0 = cfg.recompute_layers?;
    let top = ctx.t.layers() / cfg.pp - 1;
    let with = |k: u64| Config {
        recompute_layers: Some(k),
        ..*cfg
    };
    if let Some(m) = ctx.confirm(cfg).filter(|m| *m <= capacity) {
        return Some((k0, m));
    }
    let hi_mem = ctx.confirm(&with(top)).filter(|m| *m <= capacity)?;
    let (mut lo, mut hi, mut best) = (k0, top, hi_mem); // lo does not fit
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match ctx.confirm(&with(mid)) {
            Some(m) if m <= capacity => {
                hi = mid;
                best = m;
            }
            _ => lo = mid,
        }
    }
    Some((hi, best))
}

/// What [`fewest_layers`] found.
enum Layers {
    /// No recomputation needed.
    NotNeeded,
    /// This many layers per stage, taking this many bytes.
    Fits(u64, u64),
    /// Even recomputing all but one layer per stage does not fit.
    Never,
}

/// Searches the space for the fastest plans that fit.
///
/// `progress` is called now and then with the count of candidates examined; it must not
/// block. Deterministic: the same request gives the same answer.
pub fn search(req: &Request, progress: &mut dyn FnMut(Progress)) -> Result<Outcome> {
    run(req, progress, true)
}

fn run(req: &Request, progress: &mut dyn FnMut(Progress), advise: bool) -> Result<Outcome> {
    let t = transformer(&req.model)?;
    check(req, t)?;
    let all = candidates(req, t)?;
    let total = all.len() as u64;
    let mut ctx = Ctx {
        req,
        t,
        micro_batches: Default::default(),
        estimates: 0,
        replays: 0,
        first_error: None,
        closest: None,
    };
    let capacity = req.cluster.gpu.memory_bytes;
    // Heap of (time key, insertion index) so that ties pop in a fixed order.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::with_capacity(all.len());
    let mut pool = all;
    for (i, c) in pool.iter().enumerate() {
        heap.push(Reverse((key(ctx.price(&c.cfg).total_s), i)));
    }
    // Smallest micro-batch known not to fit, by every other dimension.
    let mut too_big: HashMap<FailKey, u64> = HashMap::new();
    let fail_key = |c: &Config, choice: RecomputeChoice| {
        (
            c.tp,
            c.pp,
            c.zero,
            c.offload as u8,
            c.recompute as u8,
            c.sequence_parallel,
            match c.schedule {
                Schedule::Gpipe => 0,
                Schedule::OneFOneB => 1,
                Schedule::Interleaved(v) => 1 + v,
            },
            c.recompute_layers,
            choice as u8,
        )
    };
    let mut plans = Vec::new();
    let mut done = 0u64;
    let mut host_rejected = 0u64;
    while let Some(Reverse((_, i))) = heap.pop() {
        done += 1;
        if done % 4096 == 0 {
            progress(Progress { done, total });
        }
        let cand = pool[i];
        let cfg = cand.cfg;
        if !ctx.host_fits(&cfg) {
            host_rejected += 1;
            continue;
        }
        if let Some(known) = cand.mem {
            if cand.confirmed {
                plans.push(ctx.plan(&cfg, known));
                if plans.len() >= req.top {
                    break;
                }
                continue;
            }
            // Resolved by the bisection on allocated bytes: the allocator's replay may need
            // more recomputed layers; the candidate goes back at its new price.
            if let Some((k, mem)) = fewest_layers_replayed(&mut ctx, &cfg, capacity) {
                let resolved = Config {
                    recompute_layers: Some(k),
                    ..cfg
                };
                pool.push(Cand {
                    cfg: resolved,
                    choice: cand.choice,
                    mem: Some(mem),
                    confirmed: true,
                });
                heap.push(Reverse((key(ctx.price(&resolved).total_s), pool.len() - 1)));
            }
            continue;
        }
        let fk = fail_key(&cfg, cand.choice);
        if too_big.get(&fk).is_some_and(|&mb| cfg.micro_batch >= mb) {
            continue;
        }
        if cand.choice == RecomputeChoice::Optimal {
            // Unresolved: find its layer count, then re-enter at the true price.
            match fewest_layers(&mut ctx, &cfg, capacity) {
                Layers::Fits(k, mem) => {
                    let resolved = Config {
                        recompute: Recompute::Full,
                        recompute_layers: Some(k),
                        ..cfg
                    };
                    pool.push(Cand {
                        cfg: resolved,
                        choice: RecomputeChoice::Optimal,
                        mem: Some(mem),
                        confirmed: false,
                    });
                    heap.push(Reverse((key(ctx.price(&resolved).total_s), pool.len() - 1)));
                }
                Layers::NotNeeded => {}
                Layers::Never => {
                    too_big.insert(fk, cfg.micro_batch);
                }
            }
            continue;
        }
        let mem = match ctx.memory(&cfg) {
            Some(m) if m <= capacity => ctx.confirm(&cfg),
            other => other,
        };
        match mem {
            Some(mem) if mem <= capacity => {
                plans.push(ctx.plan(&cfg, mem));
                if plans.len() >= req.top {
                    break;
                }
            }
            Some(_) => {
                let e = too_big.entry(fk).or_insert(u64::MAX);
                *e = (*e).min(cfg.micro_batch);
            }
            None => {}
        }
    }
    progress(Progress { done, total });
    // Equally fast plans (e.g. ZeRO stages whose communication is hidden) rank by memory, so
    // the best plan leaves the most headroom.
    plans.sort_by(|a, b| {
        a.step_time_s
            .total_cmp(&b.step_time_s)
            .then(a.peak_bytes_per_gpu.cmp(&b.peak_bytes_per_gpu))
    });
    let estimates = ctx.estimates;
    if plans.is_empty() && ctx.closest.is_none() && host_rejected > 0 {
        return Ok(Outcome {
            plans,
            closest: None,
            suggestions: vec![format!(
                "every configuration offloads more than the {:.0} GiB of host memory per node",
                req.cluster.host_memory_bytes as f64 / GIB
            )],
            candidates: total,
            estimates,
        });
    }
    if plans.is_empty() && ctx.closest.is_none() {
        return Err(match ctx.first_error {
            Some(e) => e.into(),
            None => no_match(req, t),
        });
    }
    let (closest, suggestions) = if plans.is_empty() {
        let (bytes, cfg) = ctx.closest.expect("checked above");
        let closest = ctx.plan(&cfg, bytes);
        let suggestions = if advise {
            suggest(req, bytes)
        } else {
            Vec::new()
        };
        (Some(closest), suggestions)
    } else {
        (None, Vec::new())
    };
    Ok(Outcome {
        plans,
        closest,
        suggestions,
        candidates: total,
        estimates,
    })
}

fn check(req: &Request, t: &Transformer) -> Result<()> {
    if req.global_batch == 0 || req.seq == 0 {
        return Err(Error::Request(
            "--global-batch and --seq must be at least 1".into(),
        ));
    }
    check_sizes(req.global_batch, req.seq)?;
    if req.precisions.is_empty() {
        return Err(Error::Request("no precision to search".into()));
    }
    let gpu = req.cluster.gpu;
    if let Some(p) = req.precisions.iter().find(|p| !p.runs_on(gpu)) {
        // The time model prices bf16 on bf16 tensor cores; emulated bf16 is not modelled.
        return Err(Error::Request(format!(
            "--precision {} on the {}: it has no native bf16 (compute capability {}.{}; bf16 needs 8.0), and torch runs bf16 there only emulated, which vram does not price; search fp16-amp or fp32",
            p.flag(),
            gpu.name,
            gpu.sm_major,
            gpu.sm_minor
        )));
    }
    if req.top == 0 {
        return Err(Error::Request("--top must be at least 1".into()));
    }
    if t.layers() == 0 {
        return Err(Error::Request("the model has no layers".into()));
    }
    if !req.stack.partial_recompute() {
        let what = match (req.pins.recompute, req.pins.sequence_parallel) {
            (Some(RecomputeChoice::Selective), _) => Some("--recompute selective"),
            (Some(RecomputeChoice::Optimal), _) => Some("--recompute optimal"),
            (_, Some(true)) => Some("--sequence-parallel"),
            _ => None,
        };
        if let Some(what) = what {
            return Err(Error::Request(format!(
                "{what} needs --stack megatron: a Hugging Face model (the transformers stack that \
                 DeepSpeed, accelerate and torchrun run) recomputes every layer or none \
                 (gradient_checkpointing_enable) and has no Megatron sequence parallelism"
            )));
        }
    }
    let kv_heads = t.blocks.typical().kv_heads;
    if let Some(tp) = req
        .pins
        .tp
        .filter(|tp| req.stack != Stack::Megatron && *tp > 1 && kv_heads > 0 && kv_heads % tp != 0)
    {
        return Err(Error::Request(format!(
            "--tp {tp} needs --stack megatron: a Hugging Face model's tensor parallelism \
             (transformers' tensor-parallel plan, DeepSpeed's AutoTP) gives each rank whole \
             key-value heads, and this model has {kv_heads}"
        )));
    }
    if !req.stack.pipeline() {
        let what = match (req.pins.pp, req.pins.schedule) {
            (Some(pp), _) if pp > 1 => Some(format!("--pp {pp}")),
            (_, Some(s)) if s != Schedule::OneFOneB => {
                Some(format!("--schedule {}", schedule_name(s)))
            }
            _ => None,
        };
        if let Some(what) = what {
            return Err(Error::Request(format!(
                "{what} needs --stack megatron: vram plans no pipeline of a Hugging Face model \
                 (DeepSpeed pipelines only a PipelineModule, accelerate only Megatron-LM's model; \
                 transformers' own DistributedConfig(pp_size) has no micro-batch schedule and no FSDP beside it)"
            )));
        }
    }
    if let (Some(tp), Some(pp), Some(dp)) = (req.pins.tp, req.pins.pp, req.pins.dp) {
        if tp.saturating_mul(pp).saturating_mul(dp) != req.cluster.gpus {
            return Err(Error::Request(format!(
                "--tp {tp} x --pp {pp} x --dp {dp} = {} but --gpus is {}",
                tp.saturating_mul(pp).saturating_mul(dp),
                req.cluster.gpus
            )));
        }
    }
    Ok(())
}

/// Why no configuration matches: the pins whose release alone would give configurations are
/// named (each is a rule of the search: tp x pp x dp = GPUs, dp divides the global batch,
/// offload needs ZeRO and parameter offload ZeRO-3, a pipeline takes ZeRO-1 at most, an
/// interleaved schedule needs the layers to split into pp x chunks and a micro-batch count
/// that pp divides).
fn no_match(req: &Request, t: &Transformer) -> Error {
    let p = req.pins;
    let num = |flag: &str, v: Option<u64>| v.map(|v| format!("{flag} {v}"));
    /// A pin as the flag writes it (`None`: not pinned), and how to release it.
    type Pinned = (Option<String>, fn(&mut Pins));
    let pinned: [Pinned; 9] = [
        (num("--tp", p.tp), |q| q.tp = None),
        (num("--pp", p.pp), |q| q.pp = None),
        (num("--dp", p.dp), |q| q.dp = None),
        (num("--micro-batch", p.micro_batch), |q| {
            q.micro_batch = None
        }),
        (num("--zero", p.zero.map(u64::from)), |q| q.zero = None),
        (
            p.offload.map(|o| {
                format!(
                    "--offload {}",
                    match o {
                        Offload::None => "none",
                        Offload::Optimizer => "optimizer",
                        Offload::Params => "params",
                    }
                )
            }),
            |q| q.offload = None,
        ),
        (
            p.recompute.map(|r| {
                format!(
                    "--recompute {}",
                    match r {
                        RecomputeChoice::None => "none",
                        RecomputeChoice::Selective => "selective",
                        RecomputeChoice::Full => "full",
                        RecomputeChoice::Optimal => "optimal",
                    }
                )
            }),
            |q| q.recompute = None,
        ),
        (
            p.sequence_parallel.map(|sp| {
                if sp {
                    "--sequence-parallel".to_string()
                } else {
                    "--no-sequence-parallel".to_string()
                }
            }),
            |q| q.sequence_parallel = None,
        ),
        (
            p.schedule.map(|s| match s {
                Schedule::OneFOneB => "--schedule 1f1b".to_string(),
                Schedule::Gpipe => "--schedule gpipe".to_string(),
                Schedule::Interleaved(v) => format!("--schedule interleaved:{v}"),
            }),
            |q| q.schedule = None,
        ),
    ];
    let releasable: Vec<String> = pinned
        .into_iter()
        .filter_map(|(name, release)| {
            let name = name?;
            let mut r = req.clone();
            release(&mut r.pins);
            candidates(&r, t)
                .is_ok_and(|c| !c.is_empty())
                .then_some(name)
        })
        .collect();
    let rules = "tp x pp x dp = GPUs, dp divides the global batch; offload needs ZeRO, \
                 --offload params ZeRO 3; a pipeline takes ZeRO 1 at most";
    Error::Request(if releasable.is_empty() {
        format!("no configuration matches: the pinned degrees, the GPU count and the global batch must agree ({rules})")
    } else {
        format!(
            "no configuration matches the pins together ({rules}); without {} it would",
            releasable.join(" or without ")
        )
    })
}

/// Refuses a global batch or sequence length beyond what any step could hold (the step's own
/// limits, `vram_model::setup::MAX_SIZE` and `MAX_TOKENS`): past them the arithmetic of the
/// search would overflow, and the input is a typo.
pub(crate) fn check_sizes(global_batch: u64, seq: u64) -> Result<()> {
    use vram_model::setup::{MAX_SIZE, MAX_TOKENS};
    if seq > MAX_SIZE {
        return Err(Error::Request(format!(
            "--seq {seq} must be between 1 and {MAX_SIZE}"
        )));
    }
    if global_batch > MAX_TOKENS {
        return Err(Error::Request(format!(
            "--global-batch {global_batch} must be between 1 and {MAX_TOKENS}"
        )));
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

/// What would make a request fit, given the least memory any configuration needed.
fn suggest(req: &Request, least: u64) -> Vec<String> {
    let mut out = vec![format!(
        "the closest configuration needs {:.1} GiB per GPU; {} has {:.1} GiB",
        least as f64 / GIB,
        // A GPU given by its size alone by its name, which gives the size it has.
        if req.cluster.gpu.id == "custom" {
            "the GPU given"
        } else {
            req.cluster.gpu.id
        },
        req.cluster.gpu.memory_bytes as f64 / GIB
    )];
    let bigger: Vec<&str> = vram_model::gpu::GPUS
        .iter()
        .filter(|g| g.memory_bytes >= least)
        .map(|g| g.id)
        .collect();
    if !bigger.is_empty() {
        out.push(format!(
            "a GPU with at least {:.1} GiB would fit it: {}",
            least as f64 / GIB,
            bigger.join(", ")
        ));
    }
    for factor in [2u64, 4, 8, 16, 32, 64] {
        let gpus = req.cluster.gpus * factor;
        if gpus > 1 << 20 {
            break;
        }
        let mut more = req.clone();
        more.cluster.gpus = gpus;
        more.cluster.gpus_per_node = if req.cluster.gpus_per_node < req.cluster.gpus {
            req.cluster.gpus_per_node
        } else {
            gpus.min(8)
        };
        more.pins.dp = None;
        more.top = 1;
        if let Ok(o) = run(&more, &mut |_| {}, false) {
            if let Some(p) = o.plans.first() {
                out.push(format!(
                    "{gpus} GPUs would fit it: {} at {:.2} s/step, {:.1} GiB per GPU",
                    p.label(),
                    p.step_time_s,
                    p.peak_bytes_per_gpu as f64 / GIB
                ));
                break;
            }
        }
    }
    if !req.stack.pipeline() {
        // The same GPUs with pipeline stages, selective recomputation and sequence
        // parallelism: only Megatron-LM runs them, on a model converted to its format.
        let mut megatron = req.clone();
        megatron.stack = Stack::Megatron;
        megatron.top = 1;
        if let Ok(o) = run(&megatron, &mut |_| {}, false) {
            if let Some(p) = o.plans.first() {
                out.push(format!(
                    "Megatron-LM would fit it on these {} GPUs (--stack megatron, the model \
                     converted to its format): {} at {:.2} s/step, {:.1} GiB per GPU",
                    req.cluster.gpus,
                    p.label(),
                    p.step_time_s,
                    p.peak_bytes_per_gpu as f64 / GIB
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_in_order() {
        // 3072 = 2^10 · 3: (10 + 1)(1 + 1) = 22 divisors.
        let d = divisors(3072);
        assert_eq!(d.len(), 22);
        assert_eq!(&d[..6], &[1, 2, 3, 4, 6, 8]);
        assert_eq!(*d.last().unwrap(), 3072);
        assert_eq!(divisors(1), vec![1]);
        assert_eq!(divisors(36), vec![1, 2, 3, 4, 6, 9, 12, 18, 36]);
    }

    #[test]
    fn time_keys_sort_like_times() {
        let t = [0.0, 1e-9, 0.5, 1.0, 2.5, 1e6];
        assert!(t.windows(2).all(|w| key(w[0]) < key(w[1])));
    }

    #[test]
    fn labels_name_every_searched_dimension() {
        let p = Plan {
            tp: 8,
            pp: 8,
            dp: 24,
            micro_batch: 1,
            grad_accum: 96,
            zero_stage: 1,
            offload: Offload::Optimizer,
            recompute: Recompute::Full,
            recompute_layers: Some(3),
            sequence_parallel: true,
            schedule: Schedule::Interleaved(2),
            precision: Precision::Bf16Amp,
            amp_style: AmpStyle::Megatron,
            step_time_s: 1.0,
            tokens_per_s: 1.0,
            mfu: 0.5,
            tflops_per_gpu: 150.0,
            peak_bytes_per_gpu: 1,
            bound: Bound::Compute,
            time: StepTime::default(),
        };
        assert_eq!(
            p.label(),
            "tp8 pp8 dp24 mb1x96 zero1 offload-opt sp interleaved-2 rc-full:3"
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["schedule"], "interleaved-2");
        assert_eq!(v["recompute"], "full");
        assert_eq!(v["offload"], "optimizer");
    }
}
