//! The units the host side of transformers' `generate` is counted in (issue 33): kernel
//! launches, view operators, `nn.Module` calls, Python function calls and host syncs. Each
//! mechanism counts its own module's work in these units (`generate_host` in its module, held
//! to transformers 5.24 on the CPU by `tests/engines/generate_ops.py`); `vram_plan::generate`
//! adds `generate`'s own loop around the layers and prices the counts.

use serde::Serialize;

use crate::setup::{Attention as Impl, Kernels};

/// Python function calls per module call: `Module.__call__`, `_call_impl`, the module's
/// `forward` and its decorators (`deprecate_kwarg`, `GradientCheckpointingLayer.__call__`,
/// `check_model_inputs`), counted at 7.0–7.3 per module on Llama, Qwen3 and Gemma 3's layers
/// (`crates/vram-plan/tests/data/generate_ops/counts.json`).
pub const PY_PER_MODULE: f64 = 7.0;

/// A stretch of host work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Host {
    /// Kernels launched (operators that are not views).
    pub kernels: f64,
    /// View operators (dispatched, no kernel).
    pub views: f64,
    /// `nn.Module` calls.
    pub modules: f64,
    /// Python function calls (module machinery, forwards, helpers, `generate`'s own).
    pub py: f64,
    /// Host syncs (`.item()`, `bool(tensor)`, `nonzero`).
    pub syncs: f64,
}

impl Host {
    /// `k` operators that launch a kernel and `v` views, outside any module.
    pub fn op(k: f64, v: f64) -> Host {
        Host {
            kernels: k,
            views: v,
            ..Host::default()
        }
    }

    /// One module call whose forward launches `k` kernels and `v` views and makes `extra_py`
    /// Python calls beyond the module machinery's [`PY_PER_MODULE`].
    pub fn module(k: f64, v: f64, extra_py: f64) -> Host {
        Host {
            kernels: k,
            views: v,
            modules: 1.0,
            py: PY_PER_MODULE + extra_py,
            syncs: 0.0,
        }
    }

    /// Adds `o`.
    pub fn add(&mut self, o: Host) {
        self.kernels += o.kernels;
        self.views += o.views;
        self.modules += o.modules;
        self.py += o.py;
        self.syncs += o.syncs;
    }

    /// This work `n` times.
    pub fn times(mut self, n: f64) -> Host {
        self.kernels *= n;
        self.views *= n;
        self.modules *= n;
        self.py *= n;
        self.syncs *= n;
        self
    }
}

/// Which forward a count is for: the prompt's (`generate`'s prefill, `grouped_mm` experts) or
/// one decode step's (one token, `batched_mm` experts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The prompt's forward.
    Prefill,
    /// One new token's forward.
    Decode,
}

/// What a mechanism's host count depends on besides its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCtx {
    /// The attention implementation (`attn_implementation`).
    pub attention: Impl,
    /// The forward counted.
    pub phase: Phase,
    /// Installed kernel packages transformers picks up.
    pub kernels: Kernels,
}

impl HostCtx {
    /// Whether this is the prompt's forward.
    pub fn prefill(&self) -> bool {
        self.phase == Phase::Prefill
    }
}

/// `n` `nn.Linear` calls: the module and one GEMM (`mm`, or `addmm` with a bias), with `t`,
/// `view` and `_unsafe_view` around it.
pub fn linears(n: f64) -> Host {
    Host::module(1.0, 3.0, 0.0).times(n)
}
