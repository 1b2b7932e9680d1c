//! The flags resolved into what a run needs: the library's requests (`vram_report::request`,
//! `vram_report::capacity::CapacityRequest`, `vram_plan::Request`). Every flag is read here
//! once; the subcommands take the resolved request and never look at a flag or a default again.

use anyhow::Result;
use vram_model::arch::Model;
use vram_model::finetune::step::Method;
use vram_model::gpu;
use vram_model::setup::{
    Allocator, AmpStyle, Attention, DecodeReplay, KvCache, Offload, Optimizer, Precision,
    Recompute, Setup,
};
use vram_plan::capacity::{
    self, AttentionBackend, CompilationMode, CudagraphMode, Engine, Interconnect,
};
use vram_plan::cluster::{self, Cluster};
use vram_plan::lora::EmitKind;
use vram_plan::{emit, Pins, RecomputeChoice, Request, Stack};
use vram_report::capacity::{CapacityRequest, Dtype, KvCacheDtype};
use vram_report::estimate::EstimateRequest;
use vram_report::plan::FtPlanRequest;
use vram_report::request::{FinetuneRequest, StepRequest};

use super::low::*;
use crate::bad_input;

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Fp16Amp => Precision::Fp16Amp,
            PrecisionArg::Bf16Amp => Precision::Bf16Amp,
            PrecisionArg::Bf16 => Precision::Bf16,
        }
    }
}

impl From<OptimizerArg> for Optimizer {
    fn from(o: OptimizerArg) -> Self {
        match o {
            OptimizerArg::Sgd => Optimizer::Sgd,
            OptimizerArg::Momentum => Optimizer::Momentum,
            OptimizerArg::Adamw => Optimizer::Adamw,
            OptimizerArg::Adam8bit => Optimizer::Adam8bit,
            OptimizerArg::Adafactor => Optimizer::Adafactor,
        }
    }
}

impl From<AttentionArg> for Attention {
    fn from(a: AttentionArg) -> Self {
        match a {
            AttentionArg::Eager => Attention::Eager,
            AttentionArg::Sdpa => Attention::Sdpa,
        }
    }
}

impl From<OffloadArg> for Offload {
    fn from(o: OffloadArg) -> Self {
        match o {
            OffloadArg::None => Offload::None,
            OffloadArg::Optimizer => Offload::Optimizer,
            OffloadArg::Params => Offload::Params,
        }
    }
}

impl StepArgs {
    /// The step these flags describe.
    pub fn request(&self) -> StepRequest {
        StepRequest {
            precision: self.precision.map(Into::into),
            amp_style: self.amp_style.map(|s| match s {
                AmpStyleArg::Autocast => AmpStyle::Autocast,
                AmpStyleArg::Deepspeed => AmpStyle::DeepSpeed,
                AmpStyleArg::Megatron => AmpStyle::Megatron,
            }),
            optimizer: self.optimizer.into(),
            micro_batch: self.micro_batch,
            seq: self.seq,
            grad_accum: self.grad_accum,
            recompute: match self.recompute {
                RecomputeArg::None => Recompute::None,
                RecomputeArg::Selective => Recompute::Selective,
                RecomputeArg::Full => Recompute::Full,
            },
            recompute_layers: self.recompute_layers,
            attention: self.attention.into(),
            zero: self.zero,
            offload: self.offload.into(),
            dp: self.dp,
            tp: self.tp,
            pp: self.pp,
            sequence_parallel: self.sequence_parallel,
            schedule: self.schedule,
            inference: self.inference,
            batch: self.batch,
            context: self.context,
            prompt: self.prompt,
            new_tokens: self.new_tokens,
            kv_cache: match self.kv_cache {
                KvCacheArg::Dynamic => KvCache::Dynamic,
                KvCacheArg::Static => KvCache::Static,
            },
            kv_bytes: self.kv_dtype.map(|k| match k {
                KvDtypeArg::Fp32 => 4,
                KvDtypeArg::Fp16 | KvDtypeArg::Bf16 => 2,
                KvDtypeArg::Fp8 | KvDtypeArg::Int8 => 1,
            }),
            cuda_context: self.cuda_context,
            workspace: self.workspace,
            fragmentation: self.fragmentation,
            allocator: match self.allocator {
                AllocatorArg::Pytorch => Allocator::Pytorch,
                AllocatorArg::PytorchExpandable => Allocator::PytorchExpandable,
                AllocatorArg::Vramkit => Allocator::Vramkit,
            },
            weights_cast_from_fp32: self.weights_created == WeightsCreated::Fp32,
            decode_replay: match self.decode_replay {
                DecodeReplayArg::Sampled => DecodeReplay::Sampled,
                DecodeReplayArg::Every => DecodeReplay::Every,
            },
            warmup_prompt: self.warmup_prompt,
            images: self.images,
            image_size: self.image_size,
        }
    }

    /// `model` with what the flags say of its input (`--image-size`, `--images`).
    pub fn apply_to(&self, model: Model) -> Result<Model> {
        Ok(self.request().attach(model)?)
    }

    /// The setup these flags describe for `model` on the default GPU (H100); what the step will
    /// not honour as asked is a note of the report (`vram_report::notes::of_request`).
    pub fn setup(&self, model: &Model) -> Result<Setup> {
        self.setup_on(model, None)
    }

    /// [`StepArgs::setup`] on `gpu` (its CUDA context and workspace).
    pub fn setup_on(&self, model: &Model, gpu: Option<&gpu::Gpu>) -> Result<Setup> {
        Ok(self.request().setup(model, gpu)?)
    }
}

impl FinetuneArgs {
    /// The fine-tuning these flags describe; adapter flags without adapters are bad input
    /// (they would change nothing).
    pub fn request(&self) -> Result<FinetuneRequest> {
        let d = FinetuneRequest::default();
        let method = Method::parse(&self.finetune).unwrap_or(Method::Full);
        if method == Method::Full {
            let given: Vec<&str> = [
                ("--lora-rank", self.lora_rank.is_some()),
                ("--lora-alpha", self.lora_alpha.is_some()),
                ("--lora-targets", self.lora_targets.is_some()),
                ("--lora-dropout", self.lora_dropout.is_some()),
            ]
            .into_iter()
            .filter_map(|(flag, set)| set.then_some(flag))
            .collect();
            if !given.is_empty() {
                return Err(bad_input!(
                    "{} {} for adapters: add --finetune lora or qlora",
                    given.join(", "),
                    if given.len() == 1 { "is" } else { "are" }
                ));
            }
        }
        Ok(FinetuneRequest {
            method,
            rank: self.lora_rank.unwrap_or(d.rank),
            alpha: self.lora_alpha,
            targets: self.lora_targets.clone().unwrap_or(d.targets),
            dropout: self.lora_dropout.unwrap_or(d.dropout),
            weights: self.weights,
            double_quant: self.double_quant,
            prepare_kbit: self.prepare_kbit,
            load_dtype: self.load_dtype.clone(),
            no_gradient_checkpointing: self.no_gradient_checkpointing,
        })
    }
}

impl EstimateArgs {
    /// What `vram estimate` is asked.
    pub fn request(&self) -> Result<EstimateRequest> {
        Ok(EstimateRequest {
            step: self.step.request(),
            finetune: self.finetune.request()?,
            gpu: gpu::lookup(&self.gpu)?,
            timeline: self.timeline,
            dequantized: self.dequantized,
            kernels: self.kernels,
        })
    }
}

impl CapacityArgs {
    /// `--max-model-len` read as the engine version in force reads it (the pinned one, else
    /// the default; [`vram_plan::capacity::parse_max_model_len`]).
    fn max_model_len(&self) -> Result<Option<u64>> {
        let Some(text) = &self.max_model_len else {
            return Ok(None);
        };
        let engine = match self.engine {
            EngineArg::Vllm => Engine::Vllm,
            EngineArg::Sglang => Engine::Sglang,
        };
        let version = self
            .engine_version
            .as_deref()
            .and_then(capacity::parse_version)
            .or_else(|| capacity::parse_version(engine.pinned_version()))
            .unwrap_or_default();
        capacity::parse_max_model_len(engine, version, text)
            .map(Some)
            .map_err(|why| bad_input!("{why}"))
    }

    /// What `vram capacity` is asked.
    pub fn request(&self) -> Result<CapacityRequest> {
        Ok(CapacityRequest {
            engine: match self.engine {
                EngineArg::Vllm => Engine::Vllm,
                EngineArg::Sglang => Engine::Sglang,
            },
            engine_version: self.engine_version.clone(),
            gpu: gpu::lookup(&self.gpu)?,
            gpu_memory_utilization: self.gpu_memory_utilization,
            max_model_len: self.max_model_len()?,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            kv_cache_dtype: match self.kv_cache_dtype {
                KvCacheDtypeArg::Auto => KvCacheDtype::Auto,
                KvCacheDtypeArg::Fp8 => KvCacheDtype::Fp8,
                KvCacheDtypeArg::Fp8E4m3 => KvCacheDtype::Fp8E4m3,
                KvCacheDtypeArg::Fp8E5m2 => KvCacheDtype::Fp8E5m2,
                KvCacheDtypeArg::Bfloat16 => KvCacheDtype::Bfloat16,
            },
            tensor_parallel_size: self.tensor_parallel_size,
            pipeline_parallel_size: self.pipeline_parallel_size,
            data_parallel_size: self.data_parallel_size,
            enable_expert_parallel: self.enable_expert_parallel,
            ep_size: self.ep_size,
            enable_dp_attention: self.enable_dp_attention,
            vllm_use_v1: self.vllm_use_v1,
            vllm_use_v2_model_runner: self.vllm_use_v2_model_runner,
            flashinfer_sampler: self.flashinfer_sampler,
            cudagraph_mode: self.cudagraph_mode.map(|m| match m {
                CudagraphModeArg::None => CudagraphMode::None,
                CudagraphModeArg::Piecewise => CudagraphMode::Piecewise,
                CudagraphModeArg::Full => CudagraphMode::Full,
                CudagraphModeArg::FullDecodeOnly => CudagraphMode::FullDecodeOnly,
                CudagraphModeArg::FullAndPiecewise => CudagraphMode::FullAndPiecewise,
            }),
            compilation_mode: self.compilation_mode.map(|m| match m {
                CompilationModeArg::None => CompilationMode::None,
                CompilationModeArg::StockTorchCompile => CompilationMode::StockTorchCompile,
                CompilationModeArg::DynamoTraceOnce => CompilationMode::DynamoTraceOnce,
                CompilationModeArg::VllmCompile => CompilationMode::VllmCompile,
            }),
            optimization_level: self.optimization_level,
            attention_backend: self.attention_backend.map(|b| match b {
                AttentionBackendArg::FlashAttn => AttentionBackend::FlashAttn,
                AttentionBackendArg::TritonAttn => AttentionBackend::TritonAttn,
                AttentionBackendArg::Flashinfer => AttentionBackend::Flashinfer,
                AttentionBackendArg::FlexAttention => AttentionBackend::FlexAttention,
            }),
            interconnect: self.interconnect.map(|i| match i {
                InterconnectArg::Nvls => Interconnect::NvSwitchNvls,
                InterconnectArg::Nvswitch => Interconnect::NvSwitch,
                InterconnectArg::Pcie => Interconnect::Pcie,
                InterconnectArg::Shm => Interconnect::Shm,
                InterconnectArg::Network => Interconnect::Network,
            }),
            enforce_eager: self.enforce_eager,
            driver: self.driver,
            block_size: self.block_size,
            weights: self.weights,
            dtype: match self.dtype {
                DtypeArg::Auto => Dtype::Auto,
                DtypeArg::Bfloat16 => Dtype::Bfloat16,
                DtypeArg::Float16 => Dtype::Float16,
                DtypeArg::Float32 => Dtype::Float32,
            },
            mem_fraction_static: self.mem_fraction_static,
            max_total_tokens: self.max_total_tokens,
            chunked_prefill_size: self.chunked_prefill_size,
            cuda_graph_max_bs: self.cuda_graph_max_bs,
        })
    }
}

/// What `vram plan` is asked to do.
#[derive(Debug)]
pub enum PlanJob {
    /// Search and list the plans.
    Search(Box<Request>),
    /// Search and write the launch config of the best plan the engine runs.
    Emit(Box<Request>, emit::Engine),
    /// LoRA/QLoRA plans, or their PEFT/TRL configs.
    Finetune(Box<FtPlanRequest>, Option<EmitKind>),
}

impl PlanArgs {
    /// The cluster the flags describe.
    fn cluster(&self) -> Result<Cluster> {
        let cluster = match &self.cluster {
            Some(name) => {
                Cluster::from_preset(cluster::preset(name)?, self.gpu.as_deref(), self.gpus)?
            }
            None => Cluster::for_gpu(self.gpu.as_deref().unwrap_or_default(), self.gpus)?,
        };
        if self.gpus > cluster.gpus_per_node && self.gpus % cluster.gpus_per_node != 0 {
            return Err(bad_input!(
                "--gpus {} is not a whole number of {}-GPU nodes",
                self.gpus,
                cluster.gpus_per_node
            ));
        }
        Ok(cluster)
    }

    /// What `vram plan` is asked for `model`.
    pub fn job(&self, model: Model) -> Result<PlanJob> {
        let cluster = self.cluster()?;
        if self.top == 0 {
            return Err(bad_input!("--top must be at least 1"));
        }
        let finetune = self.finetune.request()?;
        // Issue 22: LoRA/QLoRA plans (DDP replicas) and their PEFT/TRL configs.
        let peft = match self.emit {
            Some(EmitArg::Peft) => Some(EmitKind::Python),
            Some(EmitArg::PeftYaml) => Some(EmitKind::Yaml),
            _ => None,
        };
        if finetune.is_lora() || peft.is_some() {
            if finetune.is_lora() && self.emit.is_some() && peft.is_none() {
                return Err(bad_input!(
                    "--finetune {} writes PEFT/TRL configs: use --emit peft or --emit peft-yaml",
                    self.finetune.finetune
                ));
            }
            for (flag, set) in [
                ("--tp", self.tp.is_some_and(|v| v > 1)),
                ("--pp", self.pp.is_some_and(|v| v > 1)),
                ("--zero", self.zero.is_some_and(|v| v > 0)),
                ("--dp", self.dp.is_some_and(|v| v != self.gpus)),
                ("--offload", self.offload.is_some()),
            ] {
                if set {
                    return Err(bad_input!(
                        "{flag}: --finetune lora/qlora is planned as DDP, one replica per GPU"
                    ));
                }
            }
            return Ok(PlanJob::Finetune(
                Box::new(FtPlanRequest {
                    gpu: cluster.gpu,
                    gpus: self.gpus,
                    global_batch: self.global_batch,
                    seq: self.seq,
                    optimizer: self.optimizer.into(),
                    micro_batch: self.micro_batch,
                    finetune,
                    top: self.top,
                }),
                peft,
            ));
        }
        // Full training: the fine-tuning flags that would change nothing are refused.
        finetune.spec()?;
        if let Some(z) = self.zero {
            if z > 3 {
                return Err(bad_input!("--zero {z} must be 0, 1, 2 or 3"));
            }
        }
        for (flag, v) in [
            ("--tp", self.tp),
            ("--pp", self.pp),
            ("--dp", self.dp),
            ("--micro-batch", self.micro_batch),
        ] {
            if v == Some(0) {
                return Err(bad_input!("{flag} must be at least 1"));
            }
        }
        let mut req = Request::new(model, cluster, self.global_batch, self.seq);
        if !self.precision.is_empty() {
            // A precision named twice is searched once (each plan was listed twice).
            req.precisions = Vec::new();
            for p in self.precision.iter().map(|p| Precision::from(*p)) {
                if !req.precisions.contains(&p) {
                    req.precisions.push(p);
                }
            }
        }
        req.attention = self.attention.into();
        req.optimizer = self.optimizer.into();
        req.calibration.eager.kernels = self.kernels;
        req.stack = match (self.stack, self.emit) {
            (Some(StackArg::Transformers), _) => Stack::Transformers,
            (Some(StackArg::Megatron), _) | (None, Some(EmitArg::Megatron)) => Stack::Megatron,
            (None, _) => Stack::Transformers,
        };
        req.top = self.top;
        req.pins = Pins {
            tp: self.tp,
            pp: self.pp,
            dp: self.dp,
            micro_batch: self.micro_batch,
            recompute: self.recompute.map(|r| match r {
                PlanRecomputeArg::None => RecomputeChoice::None,
                PlanRecomputeArg::Selective => RecomputeChoice::Selective,
                PlanRecomputeArg::Full => RecomputeChoice::Full,
                PlanRecomputeArg::Optimal => RecomputeChoice::Optimal,
            }),
            zero: self.zero,
            offload: self.offload.map(Offload::from),
            sequence_parallel: if self.sequence_parallel {
                Some(true)
            } else if self.no_sequence_parallel {
                Some(false)
            } else {
                None
            },
            schedule: self.schedule,
        };
        let engine = match self.emit {
            None => return Ok(PlanJob::Search(Box::new(req))),
            Some(EmitArg::Deepspeed) => emit::Engine::Deepspeed,
            Some(EmitArg::Megatron) => emit::Engine::Megatron,
            Some(EmitArg::Accelerate) => emit::Engine::Accelerate,
            Some(EmitArg::Torchrun) => emit::Engine::Torchrun,
            Some(EmitArg::Peft | EmitArg::PeftYaml) => unreachable!("handled above"),
        };
        // Room for the nearest plan the engine runs when it refuses the best one.
        req.top = req.top.max(256);
        Ok(PlanJob::Emit(Box::new(req), engine))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        step: StepArgs,
        #[command(flatten)]
        finetune: FinetuneArgs,
    }

    /// The library's defaults are the flags' (the library states them for its own callers; the
    /// flags, for `--help`): the two lists are one.
    #[test]
    fn no_flag_resolves_to_the_librarys_defaults() {
        let cli = Cli::parse_from(["vram"]);
        assert_eq!(cli.step.request(), StepRequest::default());
        assert_eq!(cli.finetune.request().unwrap(), FinetuneRequest::default());
    }
}
