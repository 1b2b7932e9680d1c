//! `vram plan`: the fastest configurations that fit ([`vram_plan::search()`]), LoRA/QLoRA plans
//! ([`vram_plan::lora`]), and the launch configs of the chosen plan ([`vram_plan::emit`]).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_model::arch::{Model, Transformer};
use vram_model::finetune::step::Method;
use vram_model::fmt::{bytes, thousands};
use vram_model::setup::{AmpStyle, Offload, Precision, Recompute};
use vram_plan::emit::{self, Job};
use vram_plan::lora::{self, EmitKind, FtPlan, FtRequest};
use vram_plan::{search, Outcome, Plan, Progress, Request, Stack};

use crate::check::{same, Checker, Range, Ranges, AT_LEAST_1, ZERO_STAGE};
use crate::error::{input, Result};
use crate::request::FinetuneRequest;
use crate::{Kind, SCHEMA_VERSION};

/// The engines `--emit` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitTarget {
    /// An engine of [`vram_plan::emit::Engine`].
    Engine(emit::Engine),
    /// PEFT/TRL configs of a LoRA/QLoRA plan.
    Peft(EmitKind),
}

/// The fastest configurations that fit, best first; when none fits, the closest and what would
/// make it fit. `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `plan`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// Its parameters.
    pub params: u64,
    /// The setup line the text prints first.
    pub description: String,
    /// The GPU's catalog id, or the name of one given by its size ([`vram_model::gpu::Gpu::label`]).
    pub gpu: String,
    /// The GPU's memory.
    pub gpu_memory_bytes: u64,
    /// GPUs in the job.
    pub gpus: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Sequences per optimizer step.
    pub global_batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// The software whose kernels are priced (`transformers` or `megatron`).
    pub stack: String,
    /// The optimizer.
    pub optimizer: String,
    /// Fitting plans, fastest first.
    pub plans: Vec<PlanRow>,
    /// When nothing fits: the configuration that came closest.
    pub closest: Option<PlanRow>,
    /// When nothing fits: what would make it fit.
    pub suggestions: Vec<String>,
    /// Configurations priced.
    pub candidates: u64,
    /// Memory estimates run.
    pub estimates: u64,
    /// The model's notes ([`crate::notes::of_step`] for a training step), as the text's
    /// `note:` lines.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One configuration with its predicted speed and memory (`vram_plan::Plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRow {
    /// The label the text prints (`tp2 pp1 dp32 mb1x16 zero3 sp rc-full:4`).
    pub label: String,
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
    /// Recomputation.
    pub recompute: Recompute,
    /// Layers per stage recomputed (`null`: all, or none).
    pub recompute_layers: Option<u64>,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// Pipeline schedule (`1f1b`, `gpipe`, `interleaved-v`).
    pub schedule: String,
    /// Precision.
    pub precision: Precision,
    /// Mixed-precision layout.
    pub amp_style: AmpStyle,
    /// Seconds per optimizer step.
    pub step_time_s: f64,
    /// Tokens per second over the job.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation.
    pub mfu: f64,
    /// Hardware TFLOP/s per GPU.
    pub tflops_per_gpu: f64,
    /// Memory per GPU (the stage that holds the most), overheads included.
    pub peak_bytes_per_gpu: u64,
    /// What limits it (`compute`, `communication`, `bubble`, `memory`).
    pub bound: String,
    /// Where the time goes.
    pub time: StepTime,
}

impl Ranges for PlanRow {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.num("step_time_s", self.step_time_s, Range::SECONDS)?;
        c.num("tokens_per_s", self.tokens_per_s, Range::RATE)?;
        // Model FLOPs per second over the GPUs' peak.
        c.num("mfu", self.mfu, Range::FRACTION)?;
        c.num("tflops_per_gpu", self.tflops_per_gpu, Range::RATE)?;
        c.field("time", &self.time)
    }
}

impl PlanRow {
    /// The row against its report (`vram_plan::search`: the degrees split the GPUs, the data
    /// parallel ranks split the global batch into micro-batches and accumulation steps, the
    /// step time is the time's total and the throughput the batch's tokens over it); `fits`:
    /// a plan, which fits the GPU, not the closest miss.
    fn consistent(&self, c: &mut Checker, r: &PlanReport, fits: bool) -> Result<()> {
        c.int("tp", self.tp, AT_LEAST_1)?;
        c.int("pp", self.pp, AT_LEAST_1)?;
        c.int("dp", self.dp, AT_LEAST_1)?;
        c.int("micro_batch", self.micro_batch, AT_LEAST_1)?;
        c.int("grad_accum", self.grad_accum, AT_LEAST_1)?;
        c.int("zero_stage", u64::from(self.zero_stage), ZERO_STAGE)?;
        // A row's parallel layout and batch split, named by the row (`plans[0]`): any of its
        // factors may be the one edited.
        let gpus = self.tp.saturating_mul(self.pp).saturating_mul(self.dp);
        c.agree(
            "",
            format!(
                "tp {} x pp {} x dp {} = {gpus} GPUs",
                self.tp, self.pp, self.dp
            ),
            gpus == r.gpus,
            || format!("gpus {}", r.gpus),
        )?;
        batch_split(
            c,
            (self.dp, self.micro_batch, self.grad_accum),
            r.global_batch,
        )?;
        // The label the text and the page print for the row opens with its layout and ZeRO
        // stage (`vram_plan::search::Plan::label`).
        let head = format!(
            "tp{} pp{} dp{} mb{}x{}",
            self.tp, self.pp, self.dp, self.micro_batch, self.grad_accum
        );
        let zero = format!(" zero{}", self.zero_stage);
        let rest = self.label.strip_prefix(&head);
        let labelled = rest.is_some_and(|rest| {
            (rest.is_empty() || rest.starts_with(' '))
                && rest.split(' ').any(|w| w.starts_with("zero")) == (self.zero_stage > 0)
                && (self.zero_stage == 0 || rest.starts_with(&zero))
        });
        c.agree("label", format!("{:?}", self.label), labelled, || {
            format!(
                "the row's fields, which read {head}{}",
                if self.zero_stage > 0 {
                    zero.as_str()
                } else {
                    ""
                }
            )
        })?;
        c.agree(
            "step_time_s",
            self.step_time_s,
            same(self.step_time_s, self.time.total_s),
            || format!("time.total_s {}", self.time.total_s),
        )?;
        let tokens = (r.global_batch as f64) * (r.seq as f64) / self.step_time_s;
        c.agree(
            "tokens_per_s",
            self.tokens_per_s,
            same(self.tokens_per_s, tokens),
            || {
                format!(
                    "global_batch {} x seq {} over step_time_s {}, {tokens}",
                    r.global_batch, r.seq, self.step_time_s
                )
            },
        )?;
        if fits {
            fits_gpu(
                c,
                "peak_bytes_per_gpu",
                self.peak_bytes_per_gpu,
                r.gpu_memory_bytes,
            )?;
        }
        Ok(())
    }
}

/// A plan row's data-parallel ranks, micro-batches and accumulation steps make the report's
/// global batch (`vram_plan::search` and `vram_plan::lora` split it so); named by the row, since
/// any of the three may be the one edited.
fn batch_split(
    c: &mut Checker,
    (dp, micro_batch, grad_accum): (u64, u64, u64),
    global_batch: u64,
) -> Result<()> {
    let batch = dp.saturating_mul(micro_batch).saturating_mul(grad_accum);
    c.agree(
        "",
        format!(
            "dp {dp} x micro_batch {micro_batch} x grad_accum {grad_accum} = {batch} sequences"
        ),
        batch == global_batch,
        || format!("global_batch {global_batch}"),
    )
}

/// A plan row's memory per GPU, `name`, within the GPU's: a plan is one that fits.
fn fits_gpu(c: &mut Checker, name: &str, bytes: u64, gpu_memory_bytes: u64) -> Result<()> {
    c.agree(name, bytes, bytes <= gpu_memory_bytes, || {
        format!("gpu_memory_bytes {gpu_memory_bytes}: a plan is one that fits")
    })
}

impl Ranges for PlanReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.int("gpus_per_node", self.gpus_per_node, AT_LEAST_1)?;
        c.int("seq", self.seq, AT_LEAST_1)?;
        c.each("plans", &self.plans, |c, p| {
            p.ranges(c)?;
            p.consistent(c, self, true)
        })?;
        match &self.closest {
            Some(p) => {
                c.field("closest", p)?;
                c.at("closest", |c| p.consistent(c, self, false))
            }
            None => Ok(()),
        }
    }
}

/// Where a step's time goes (`vram_plan::cost::StepTime`), seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct StepTime {
    pub compute_s: f64,
    pub recompute_s: f64,
    pub model_comm_s: f64,
    pub dp_comm_s: f64,
    pub bubble_s: f64,
    pub optimizer_s: f64,
    pub offload_s: f64,
    pub total_s: f64,
    pub hardware_flops: f64,
    pub model_flops: f64,
}

impl Ranges for StepTime {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        for (name, v) in [
            ("compute_s", self.compute_s),
            ("recompute_s", self.recompute_s),
            ("model_comm_s", self.model_comm_s),
            ("dp_comm_s", self.dp_comm_s),
            ("bubble_s", self.bubble_s),
            ("optimizer_s", self.optimizer_s),
            ("offload_s", self.offload_s),
            ("total_s", self.total_s),
        ] {
            c.num(name, v, Range::SECONDS)?;
        }
        c.num("hardware_flops", self.hardware_flops, Range::FLOPS)?;
        c.num("model_flops", self.model_flops, Range::FLOPS)
    }
}

fn name_of<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

impl From<&Plan> for PlanRow {
    fn from(p: &Plan) -> Self {
        let t = &p.time;
        PlanRow {
            label: p.label(),
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            micro_batch: p.micro_batch,
            grad_accum: p.grad_accum,
            zero_stage: p.zero_stage,
            offload: p.offload,
            recompute: p.recompute,
            recompute_layers: p.recompute_layers,
            sequence_parallel: p.sequence_parallel,
            schedule: vram_plan::search::schedule_name(p.schedule),
            precision: p.precision,
            amp_style: p.amp_style,
            step_time_s: p.step_time_s,
            tokens_per_s: p.tokens_per_s,
            mfu: p.mfu,
            tflops_per_gpu: p.tflops_per_gpu,
            peak_bytes_per_gpu: p.peak_bytes_per_gpu,
            bound: name_of(p.bound),
            time: StepTime {
                compute_s: t.compute_s,
                recompute_s: t.recompute_s,
                model_comm_s: t.model_comm_s,
                dp_comm_s: t.dp_comm_s,
                bubble_s: t.bubble_s,
                optimizer_s: t.optimizer_s,
                offload_s: t.offload_s,
                total_s: t.total_s,
                hardware_flops: t.hardware_flops,
                model_flops: t.model_flops,
            },
        }
    }
}

/// The plans of a search.
pub fn report(req: &Request, out: &Outcome) -> PlanReport {
    let c = &req.cluster;
    PlanReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Plan,
        model: req.model.name().to_string(),
        params: req.model.param_count(),
        description: format!(
            "{} ({} parameters) on {} ({} per node, {}), global batch {} x {} tokens",
            req.model.name(),
            thousands(req.model.param_count()),
            c.gpu.times(c.gpus),
            c.gpus_per_node,
            c.fabric,
            req.global_batch,
            req.seq
        ),
        gpu: c.gpu.label().to_string(),
        gpu_memory_bytes: c.gpu.memory_bytes,
        gpus: c.gpus,
        gpus_per_node: c.gpus_per_node,
        global_batch: req.global_batch,
        seq: req.seq,
        stack: name_of(req.stack),
        optimizer: name_of(req.optimizer),
        plans: out.plans.iter().map(PlanRow::from).collect(),
        closest: out.closest.as_ref().map(PlanRow::from),
        suggestions: out.suggestions.clone(),
        candidates: out.candidates,
        estimates: out.estimates,
        notes: crate::notes::of_step(&req.model, true, Some(c.gpu))
            .into_iter()
            .chain(crate::notes::of_seq(&req.model, "--seq", req.seq))
            .chain(crate::notes::of_stack(req.stack, c.gpus))
            .chain(crate::notes::of_tensor_parallel(
                req.stack,
                out.plans.iter().chain(&out.closest).map(|p| p.tp),
            ))
            .chain(crate::notes::of_planned_precision(&req.precisions, c.gpu))
            .collect(),
    }
}

/// Searches `req` (progress through `on_progress`) and reports the plans.
pub fn plan(req: &Request, on_progress: &mut dyn FnMut(Progress)) -> Result<PlanReport> {
    let out = search(req, on_progress)?;
    Ok(report(req, &out))
}

/// A launch config, and what the caller should tell the user about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    /// The config text.
    pub text: String,
    /// Lines for the user (which plan was emitted, and why not the best one).
    pub notes: Vec<String>,
}

/// The launch config of the fastest plan `engine` can run, searching `req` (whose `top` should
/// leave room for the nearest plan the engine runs when it refuses the best one).
pub fn emit(
    req: &Request,
    engine: emit::Engine,
    config: Option<&str>,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<Emitted> {
    let out = search(req, on_progress)?;
    let Some(best) = out.plans.first() else {
        return Err(input(format!(
            "nothing fits, so there is no plan to emit; {}",
            out.suggestions.join("; ")
        )));
    };
    let job = Job {
        model: transformer(&req.model)?,
        global_batch: req.global_batch,
        seq: req.seq,
        gpus_per_node: req.cluster.gpus_per_node,
        config,
        stack: req.stack,
    };
    // The fastest plan the engine can run; when that is not the best one, say why.
    let refusal = emit::check(engine, best, &job).err();
    let Some(chosen) = out
        .plans
        .iter()
        .find(|p| emit::check(engine, p, &job).is_ok())
    else {
        let r = refusal.map_or_else(String::new, |r| r.to_string());
        return Err(input(format!(
            "{r} (nor can it run the other {} plans that fit; pin --zero, --pp, --offload or \
             --recompute to one it runs)",
            out.plans.len() - 1
        )));
    };
    let text = emit::emit(engine, chosen, &job).map_err(|r| input(r.to_string()))?;
    let mut notes = Vec::new();
    if let Some(r) = refusal {
        notes.push(format!(
            "the best plan, {}, is not emitted: {r}; the nearest plan it runs follows",
            best.label()
        ));
    }
    notes.extend(emit::notes(engine, chosen, &job));
    notes.extend(crate::notes::lines(&crate::notes::of_step(
        &req.model,
        true,
        Some(req.cluster.gpu),
    )));
    notes.push(format!(
        "emitted {} at {:.2} s/step, {} per GPU",
        chosen.label(),
        chosen.step_time_s,
        bytes(chosen.peak_bytes_per_gpu)
    ));
    Ok(Emitted { text, notes })
}

fn transformer(model: &Model) -> Result<&Transformer> {
    match model {
        Model::Transformer(t) => Ok(t),
        other => Err(input(format!(
            "vram plan needs a transformer; `{}` is not one",
            other.name()
        ))),
    }
}

/// LoRA/QLoRA plans (DDP, one replica per GPU). `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinetunePlanReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `finetune_plan`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// Its parameters.
    pub params: u64,
    /// The setup line the text prints first.
    pub description: String,
    /// `lora` or `qlora`.
    pub finetune: String,
    /// The base's storage.
    pub weights: String,
    /// The adapters' parameters.
    pub trainable_params: u64,
    /// The GPU's catalog id, or the name of one given by its size ([`vram_model::gpu::Gpu::label`]).
    pub gpu: String,
    /// The GPU's memory.
    pub gpu_memory_bytes: u64,
    /// GPUs, one replica each.
    pub gpus: u64,
    /// Sequences per optimizer step.
    pub global_batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// Plans that fit, best first.
    pub plans: Vec<FtPlanRow>,
    /// The model's notes ([`crate::notes::of_step`] for a training step), as the text's
    /// `note:` lines.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One LoRA/QLoRA plan with its label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FtPlanRow {
    /// `dp1 mb4x4 gc`.
    pub label: String,
    /// The plan.
    #[serde(flatten)]
    pub plan: FtPlan,
}

impl Ranges for FinetunePlanReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.int("seq", self.seq, AT_LEAST_1)?;
        // Each row's `FtPlan` is flattened into it. Against the report, as
        // `vram_plan::lora` plans them: one replica per GPU, the replicas' micro-batches and
        // accumulation steps make the global batch, every row fits the GPU and trains the
        // report's adapters.
        c.each("plans", &self.plans, |c, row| {
            let p = &row.plan;
            p.ranges(c)?;
            c.int("dp", p.dp, AT_LEAST_1)?;
            c.int("micro_batch", p.micro_batch, AT_LEAST_1)?;
            c.int("grad_accum", p.grad_accum, AT_LEAST_1)?;
            c.agree("dp", p.dp, p.dp == self.gpus, || {
                format!("gpus {}: one replica per GPU", self.gpus)
            })?;
            batch_split(c, (p.dp, p.micro_batch, p.grad_accum), self.global_batch)?;
            fits_gpu(c, "bytes_per_gpu", p.bytes_per_gpu, self.gpu_memory_bytes)?;
            // The label the text and the page print for the row (`FtPlan::label`).
            c.agree(
                "label",
                format!("{:?}", row.label),
                row.label == p.label(),
                || format!("the row's fields, which read {:?}", p.label()),
            )?;
            c.agree(
                "trainable_params",
                p.trainable_params,
                p.trainable_params == self.trainable_params,
                || format!("the report's trainable_params {}", self.trainable_params),
            )
        })
    }
}

/// The ranking the LoRA/QLoRA plans follow.
pub const FT_RANKING: &str = "ranked by matmul FLOPs per step (checkpointing recomputes the forward), then fewer accumulation steps";

/// What a LoRA/QLoRA plan request adds to the job.
#[derive(Debug, Clone)]
pub struct FtPlanRequest {
    /// The GPU.
    pub gpu: &'static vram_model::gpu::Gpu,
    /// GPUs.
    pub gpus: u64,
    /// Sequences per optimizer step.
    pub global_batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// The optimizer.
    pub optimizer: vram_model::setup::Optimizer,
    /// A pinned micro-batch.
    pub micro_batch: Option<u64>,
    /// The adapters.
    pub finetune: FinetuneRequest,
    /// Plans to list.
    pub top: usize,
}

fn ft_search(
    model: &Model,
    r: &FtPlanRequest,
) -> Result<(Vec<FtPlan>, vram_model::finetune::step::FinetuneSpec)> {
    let spec = r.finetune.spec_for(model)?;
    let t = transformer(model)?;
    let plans = lora::search(
        t,
        &FtRequest {
            gpu: r.gpu,
            gpus: r.gpus,
            global_batch: r.global_batch,
            seq: r.seq,
            optimizer: r.optimizer,
            micro_batch: r.micro_batch,
            spec: spec.clone(),
        },
    )?;
    Ok((plans, spec))
}

/// LoRA/QLoRA plans of `model`.
pub fn finetune_plan(model: &Model, r: &FtPlanRequest) -> Result<FinetunePlanReport> {
    let (mut plans, spec) = ft_search(model, r)?;
    plans.truncate(r.top);
    let t = transformer(model)?;
    let trainable = vram_model::finetune::lora(t, &spec.lora)?.trainable_params;
    Ok(FinetunePlanReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::FinetunePlan,
        model: t.name.clone(),
        params: t.param_count(),
        description: format!(
            "{} ({} parameters, {} trainable) {} on {} (DDP), global batch {} x {} tokens",
            t.name,
            thousands(t.param_count()),
            thousands(trainable),
            spec.method.name(),
            r.gpu.times(r.gpus),
            r.global_batch,
            r.seq
        ),
        finetune: spec.method.name().into(),
        weights: spec.weights.name(),
        trainable_params: trainable,
        gpu: r.gpu.label().into(),
        gpu_memory_bytes: r.gpu.memory_bytes,
        gpus: r.gpus,
        global_batch: r.global_batch,
        seq: r.seq,
        plans: plans
            .into_iter()
            .map(|p| FtPlanRow {
                label: p.label(),
                plan: p,
            })
            .collect(),
        notes: crate::notes::of_step(model, true, Some(r.gpu)),
    })
}

/// The PEFT/TRL configs of the best LoRA/QLoRA plan.
pub fn finetune_emit(model: &Model, r: &FtPlanRequest, kind: EmitKind) -> Result<Emitted> {
    let (plans, spec) = ft_search(model, r)?;
    let Some(best) = plans.first() else {
        return Err(input(format!(
            "no {} configuration fits on {}: try --finetune qlora, a smaller --seq or more GPUs",
            spec.method.name(),
            r.gpu.times(r.gpus)
        )));
    };
    let t = transformer(model)?;
    Ok(Emitted {
        text: lora::emit_config(t, &spec, best, r.seq, kind),
        notes: std::iter::once(format!(
            "emitted {} {} at {} per GPU",
            spec.method.name(),
            best.label(),
            bytes(best.bytes_per_gpu)
        ))
        .chain(crate::notes::lines(&crate::notes::of_step(
            model,
            true,
            Some(r.gpu),
        )))
        .collect(),
    })
}

/// Whether the request is for LoRA/QLoRA plans.
pub fn is_finetune(f: &FinetuneRequest) -> bool {
    f.method != Method::Full
}

impl PlanReport {
    /// The second line: how the plans were priced and searched.
    pub fn priced_line(&self) -> String {
        format!(
            "priced as {} with {}; searched {} configurations, {} memory estimates",
            match self.stack.as_str() {
                "megatron" => "Megatron-LM (fused kernels)",
                _ => "transformers (PyTorch eager, H100-measured kernels)",
            },
            self.optimizer,
            thousands(self.candidates),
            thousands(self.estimates)
        )
    }

    /// The verdict when nothing fits (`None` when plans fit).
    pub fn nothing_fits(&self) -> Option<String> {
        self.plans.is_empty().then(|| {
            format!(
                "nothing fits in {} per GPU; closest:",
                bytes(self.gpu_memory_bytes)
            )
        })
    }

    /// The table's header and rows, as the text prints them.
    pub fn table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let head = vec![
            "configuration",
            "step s",
            "tokens/s",
            "MFU",
            "TFLOP/s/GPU",
            "mem/GPU",
            "bound",
        ];
        let shown: Vec<&PlanRow> = if self.plans.is_empty() {
            self.closest.iter().collect()
        } else {
            self.plans.iter().collect()
        };
        let rows = shown
            .iter()
            .map(|p| {
                vec![
                    p.label.clone(),
                    format!("{:.3}", p.step_time_s),
                    format!("{:.0}", p.tokens_per_s),
                    format!("{:.1}%", p.mfu * 100.0),
                    format!("{:.1}", p.tflops_per_gpu),
                    bytes(p.peak_bytes_per_gpu),
                    p.bound.clone(),
                ]
            })
            .collect();
        (head, rows)
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut w = String::new();
        let _ = writeln!(w, "{}", self.description);
        let _ = writeln!(w, "{}", self.priced_line());
        match self.nothing_fits() {
            Some(l) => {
                let _ = writeln!(w, "\n{l}");
            }
            None => {
                let _ = writeln!(w);
            }
        }
        let (head, rows) = self.table();
        let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (i, cell) in r.iter().enumerate() {
                width[i] = width[i].max(cell.len());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i == 0 {
                    s += &format!("{:<w$}", cell, w = width[0]);
                } else {
                    s += &format!("  {:>w$}", cell, w = width[i]);
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(
            w,
            "{}",
            line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>())
        );
        for r in &rows {
            let _ = writeln!(w, "{}", line(r));
        }
        for s in &self.suggestions {
            let _ = writeln!(w, "- {s}");
        }
        let _ = crate::notes::write(&mut w, &self.notes);
        w
    }
}

impl FinetunePlanReport {
    /// The table's rows: label, TFLOP/step, mem/GPU.
    pub fn rows(&self) -> Vec<[String; 3]> {
        self.plans
            .iter()
            .map(|p| {
                [
                    p.label.clone(),
                    format!("{:.1}", p.plan.flops_per_gpu / 1e12),
                    bytes(p.plan.bytes_per_gpu),
                ]
            })
            .collect()
    }

    /// The verdict when nothing fits.
    pub fn nothing_fits(&self) -> Option<String> {
        self.plans
            .is_empty()
            .then(|| format!("nothing fits in {} per GPU", bytes(self.gpu_memory_bytes)))
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.description);
        let _ = writeln!(out, "{FT_RANKING}");
        if let Some(l) = self.nothing_fits() {
            let _ = writeln!(out, "\n{l}");
            let _ = crate::notes::write(&mut out, &self.notes);
            return out;
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<20} {:>12} {:>10}",
            "configuration", "TFLOP/step", "mem/GPU"
        );
        for [l, f, m] in self.rows() {
            let _ = writeln!(out, "{l:<20} {f:>12} {m:>10}");
        }
        let _ = crate::notes::write(&mut out, &self.notes);
        out
    }
}

/// Whether `Stack` is the planner's transformers stack (for callers choosing a default).
pub fn default_stack(emit: Option<EmitTarget>) -> Stack {
    match emit {
        Some(EmitTarget::Engine(emit::Engine::Megatron)) => Stack::Megatron,
        _ => Stack::Transformers,
    }
}
