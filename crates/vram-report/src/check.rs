//! The ranges of a report's quantities, checked when a report is read back (`vram report` on a
//! file someone may have edited): a size, a time, a count or a rate is never negative, a share
//! is a fraction in [0, 1], and no figure is NaN or infinite.
//!
//! Two rules cover every number a report holds:
//!
//! - **Integers** (sizes in bytes, counts, indices): from 0 to 2^53, the range a JSON reader
//!   that keeps numbers as doubles (JavaScript, `jq`) holds exactly, and far above any figure
//!   `vram` writes (2^53 bytes is 8 PiB; sums of a few such figures cannot overflow a `u64`).
//!   The signed ones, [`SIGNED`], may be as low as -2^53. [`integers`] checks every integer of
//!   the JSON before the typed read, so a negative size is named by its path and range, not as
//!   serde's "expected u64 at line 1 column 270". A few integers have a narrower range, checked
//!   with the floats: a GPU's memory, a fit search's answer and a stage's forward runs are at
//!   least 1; a checkpoint segment's stage indices exist.
//! - **Floats**: each type that holds one says its range next to its definition, in its
//!   [`Ranges`] implementation ([`Range`]'s constants); [`crate::Report::from_json`] checks the
//!   report it read with them.
//!
//! A figure out of its range is [`crate::Error::OutOfRange`]: one line with the JSON path, the
//! value and the range.
//!
//! A third rule holds figures in their ranges to each other, where `vram` writes one from the
//! others and a page would print both: an estimate's `total_bytes` is its breakdown's sum and its
//! needed bytes plus the CUDA context, its `headroom_bytes` and `fits` follow from it and the GPU's
//! memory, its peaks are ordered (tensors, allocated, needed); a setup's parallel degrees are at
//! least 1 and its ZeRO stage at most 3 (a pipeline rank below the stages), its micro-batch,
//! sequence and accumulation at least 1, a generation's new tokens fewer than its context and its
//! cache element 1, 2 or 4 bytes, as the flags require; a plan's degrees multiply to its GPUs and
//! its data parallelism times micro-batch times accumulation is its global batch, its label reads
//! as its fields (degrees, split, ZeRO stage), its step time is its time's total and its tokens per
//! second the global batch's tokens over it; a capacity's budget is at most the device, its KV
//! cache at most the budget, and the length that fits at most `max_model_len` (all of it, under
//! vLLM, when the engine starts); a batch split's indices name each sequence once and each batch
//! fits; a replay's peaks are ordered (requested, allocated, reserved), its fragmentation is 1 -
//! allocated / reserved, and its out-of-memory verdicts are there exactly when it was replayed
//! against a capacity. A figure that breaks one is [`crate::Error::Inconsistent`]: one line with
//! its path, its value and what it disagrees with.

use serde_json::Value;

use crate::error::{Error, Result};

/// The range a float of a report may take: `[lo, hi]`, finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// The least value.
    pub lo: f64,
    /// The greatest value (`f64::MAX`: no bound but finiteness).
    pub hi: f64,
    /// What it is, in the error's words (`a time in seconds, at least 0`).
    pub what: &'static str,
}

impl Range {
    /// Seconds.
    pub const SECONDS: Range = Range::at_least_0("a time in seconds, at least 0");
    /// Bytes (a float where a figure is a mean or a model's).
    pub const BYTES: Range = Range::at_least_0("a size in bytes, at least 0");
    /// A count (of kernels, calls, tokens, forward runs), as a float.
    pub const COUNT: Range = Range::at_least_0("a count, at least 0");
    /// Per second (tokens, FLOPs): a rate.
    pub const RATE: Range = Range::at_least_0("a rate, at least 0");
    /// FLOPs.
    pub const FLOPS: Range = Range::at_least_0("floating-point operations, at least 0");
    /// A ratio of two non-negative figures (requests the KV pool holds at once, a recomputation
    /// overhead).
    pub const RATIO: Range = Range::at_least_0("a ratio, at least 0");
    /// A cost in a model's own units (the checkpoint chain's time units).
    pub const COST: Range = Range::at_least_0("a cost, at least 0");
    /// A share of a whole: MFU, a memory fraction, fragmentation, a batch's fill, dropout.
    pub const FRACTION: Range = Range {
        lo: 0.0,
        hi: 1.0,
        what: "a fraction from 0 to 1",
    };

    const fn at_least_0(what: &'static str) -> Range {
        Range {
            lo: 0.0,
            hi: f64::MAX,
            what,
        }
    }

    /// Whether `v` is in the range (NaN and infinities never are).
    pub fn holds(&self, v: f64) -> bool {
        v.is_finite() && v >= self.lo && v <= self.hi
    }
}

/// The greatest integer a report holds (and, negated, the least a [`SIGNED`] field does).
pub const MAX_INTEGER: u64 = 1 << 53;

/// The integer fields that may be negative, by key: an estimate's `headroom_bytes` (the GPU's
/// memory less the total: negative when it does not fit) and `cache_bytes_per_token` (what one
/// decode step adds to the cache: negative where sliding layers drop the prompt's storage).
pub const SIGNED: [&str; 2] = ["headroom_bytes", "cache_bytes_per_token"];

/// Walks a report while checking its floats, keeping the JSON path of where it is.
#[derive(Debug, Default)]
pub struct Checker {
    path: Vec<String>,
}

impl Checker {
    /// Checks `v`, the field `name` of where the checker is, against `range`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is out of it.
    pub fn num(&mut self, name: &str, v: f64, range: Range) -> Result<()> {
        if range.holds(v) {
            return Ok(());
        }
        Err(self.error(name, v.to_string(), range.what.to_string()))
    }

    /// Checks a count that is at least 1 (a stage's forward runs, a fit search's answer, a
    /// GPU's bytes), the field `name` (or, with
    /// `name` empty, where the checker is).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is 0.
    pub fn at_least_1(&mut self, name: &str, v: u64) -> Result<()> {
        if v >= 1 {
            return Ok(());
        }
        Err(self.error(name, v.to_string(), "a count of at least 1".into()))
    }

    /// Checks an integer `v`, the field `name`, against `[lo, hi]` (`what` says the range in
    /// words).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is outside.
    pub fn int(&mut self, name: &str, v: u64, (lo, hi, what): (u64, u64, &str)) -> Result<()> {
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(self.error(name, v.to_string(), what.to_string()))
    }

    /// Checks an integer `v`, the field `name`, is one of `allowed` (`what` says them in words).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is none of them.
    pub fn one_of(&mut self, name: &str, v: u64, allowed: &[u64], what: &str) -> Result<()> {
        if allowed.contains(&v) {
            return Ok(());
        }
        Err(self.error(name, v.to_string(), what.to_string()))
    }

    /// Checks that the field `name`, of value `value`, agrees with the rest of the report:
    /// `ok`, else `with` says what it disagrees with.
    ///
    /// # Errors
    /// [`Error::Inconsistent`] when it does not.
    pub fn agree(
        &mut self,
        name: &str,
        value: impl std::fmt::Display,
        ok: bool,
        with: impl FnOnce() -> String,
    ) -> Result<()> {
        if ok {
            return Ok(());
        }
        let path = self.path_with(name);
        Err(Error::Inconsistent {
            path,
            value: value.to_string(),
            with: with(),
        })
    }

    /// Checks the pair `[first, last]` of stage indices where the checker is: `first <= last <
    /// stages`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is not such a pair.
    pub fn segment(&mut self, first: usize, last: usize, stages: usize) -> Result<()> {
        if first <= last && last < stages {
            return Ok(());
        }
        Err(self.error(
            "",
            format!("[{first}, {last}]"),
            format!(
                "stage indices [first, last] with first <= last < {stages} (the chain's stages)"
            ),
        ))
    }

    fn error(&mut self, name: &str, value: String, range: String) -> Error {
        let path = self.path_with(name);
        Error::OutOfRange { path, value, range }
    }

    fn path_with(&mut self, name: &str) -> String {
        if !name.is_empty() {
            self.path.push(name.to_string());
        }
        let path = self.path_string();
        if !name.is_empty() {
            self.path.pop();
        }
        path
    }

    /// [`Checker::num`] of a field that may be null.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when it is present and out of range.
    pub fn opt(&mut self, name: &str, v: Option<f64>, range: Range) -> Result<()> {
        v.map_or(Ok(()), |v| self.num(name, v, range))
    }

    /// Checks the object in field `name` with `f`.
    ///
    /// # Errors
    /// What `f` returns.
    pub fn at(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        self.path.push(name.to_string());
        let r = f(self);
        self.path.pop();
        r
    }

    /// Checks each element of the list in field `name` with `f`.
    ///
    /// # Errors
    /// The first element's error.
    pub fn each<T>(
        &mut self,
        name: &str,
        items: &[T],
        mut f: impl FnMut(&mut Self, &T) -> Result<()>,
    ) -> Result<()> {
        for (i, item) in items.iter().enumerate() {
            self.path.push(format!("{name}[{i}]"));
            let r = f(self, item);
            self.path.pop();
            r?;
        }
        Ok(())
    }

    /// Checks a nested [`Ranges`] value in field `name`.
    ///
    /// # Errors
    /// Its error.
    pub fn field<T: Ranges + ?Sized>(&mut self, name: &str, v: &T) -> Result<()> {
        self.at(name, |c| v.ranges(c))
    }

    fn path_string(&self) -> String {
        self.path.join(".")
    }
}

/// A type of a report that holds floats: its implementation names each one's [`Range`].
pub trait Ranges {
    /// Checks every float of `self` (and of what it holds) with `c`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for the first one out of its range.
    fn ranges(&self, c: &mut Checker) -> Result<()>;
}

/// `--fragmentation` as the CLI takes it: a share of the peak allocated bytes, from 0 to 10
/// (`vram_cli::flags::low::parse_fraction`).
pub const FRAGMENTATION_FLAG: Range = Range {
    lo: 0.0,
    hi: 10.0,
    what: "a share of the allocated bytes from 0 to 10",
};

/// A parallel degree, a micro-batch, a sequence or a count of steps: at least 1.
pub const AT_LEAST_1: (u64, u64, &str) = (1, MAX_INTEGER, "a count of at least 1");

/// A ZeRO stage (`--zero`, DeepSpeed's `zero_optimization.stage`): 0 to 3.
pub const ZERO_STAGE: (u64, u64, &str) = (0, 3, "a ZeRO stage from 0 to 3");

/// Whether two floats that `vram` computed the same way agree to a part in 10^9 (the JSON
/// keeps a float's shortest repr, so a figure read back is the one written).
pub fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The floats of the types other crates define that a report holds, described here (their
/// crates do not know the reports): `vram_model`'s `Setup`, `vram_plan`'s `Capacity`,
/// `ServingChange`, `Batches`, `Stage` and `FtPlan`, and `vram_alloc`'s `PolicyResult`.
impl Ranges for vram_model::setup::Setup {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        use vram_model::setup::Mode;
        let p = self.parallel;
        c.at("parallel", |c| {
            c.int("dp", p.dp, AT_LEAST_1)?;
            c.int("tp", p.tp, AT_LEAST_1)?;
            c.int("pp", p.pp, AT_LEAST_1)?;
            c.int("zero", u64::from(p.zero), ZERO_STAGE)
        })?;
        c.at("mode", |c| match self.mode {
            Mode::Train(t) => c.at("train", |c| {
                c.int("micro_batch", t.micro_batch, AT_LEAST_1)?;
                c.int("seq", t.seq, AT_LEAST_1)?;
                c.int("grad_accum", t.grad_accum, AT_LEAST_1)
            }),
            // `vram estimate --inference` refuses `--new-tokens 0` and new tokens that leave
            // no prompt (`request.rs`), so a setup read back holds the same.
            Mode::Infer(i) => c.at("infer", |c| {
                c.int("batch", i.batch, AT_LEAST_1)?;
                // Bytes per cache element, as `--kv-dtype` sets them.
                c.one_of(
                    "kv_bytes",
                    i.kv_bytes,
                    &[1, 2, 4],
                    "1 (fp8, int8), 2 (fp16, bf16) or 4 (fp32) bytes per element",
                )?;
                c.int("new_tokens", i.new_tokens, AT_LEAST_1)?;
                c.agree("new_tokens", i.new_tokens, i.new_tokens < i.context, || {
                    format!(
                        "context {}: the prompt is the context less the new tokens, at least 1",
                        i.context
                    )
                })
            }),
        })?;
        c.at("overheads", |c| {
            c.opt(
                "fragmentation",
                self.overheads.fragmentation,
                FRAGMENTATION_FLAG,
            )
        })
    }
}

/// The memory figures an estimate and a LoRA estimate both hold, checked against each other
/// (the walk's `Estimate`, `vram_model::walk::run`): the breakdown sums to `total_bytes`, which
/// is `needed_bytes` plus the CUDA context; the peaks are ordered; `headroom_bytes` is the GPU's
/// memory less the total and `fits` says whether it is at least 0; the breakdown's CUDA context
/// is the setup's.
#[derive(Debug)]
#[allow(missing_docs)]
pub struct Totals<'a> {
    pub breakdown: &'a crate::parts::Bytes,
    pub peak_tensor_bytes: u64,
    pub peak_bytes: u64,
    pub reserved_bytes: u64,
    pub needed_bytes: u64,
    pub total_bytes: u64,
    pub cuda_context_bytes: u64,
    pub gpu: &'a crate::parts::GpuRef,
    pub gpu_memory_bytes: u64,
    pub fits: bool,
    pub headroom_bytes: i64,
}

impl Ranges for Totals<'_> {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        let parts: u64 = self
            .breakdown
            .iter()
            .fold(0u64, |a, (_, n)| a.saturating_add(n));
        let total = self.total_bytes;
        c.agree("total_bytes", total, total == parts, || {
            format!("the breakdown, which sums to {parts}")
        })?;
        let context = self.breakdown.get("cuda_context");
        c.agree(
            "setup.overheads.cuda_context_bytes",
            self.cuda_context_bytes,
            self.cuda_context_bytes == context,
            || format!("the breakdown's cuda_context {context}"),
        )?;
        c.agree(
            "total_bytes",
            total,
            total == self.needed_bytes.saturating_add(context),
            || {
                format!(
                    "needed_bytes {} plus the CUDA context's {context}",
                    self.needed_bytes
                )
            },
        )?;
        c.agree(
            "peak_tensor_bytes",
            self.peak_tensor_bytes,
            self.peak_tensor_bytes <= self.peak_bytes,
            || format!("peak_bytes {}, which holds every tensor", self.peak_bytes),
        )?;
        for (name, v) in [
            ("needed_bytes", self.needed_bytes),
            ("reserved_bytes", self.reserved_bytes),
        ] {
            c.agree("peak_bytes", self.peak_bytes, self.peak_bytes <= v, || {
                format!("{name} {v}, which holds the allocated peak")
            })?;
        }
        let gpu = self.gpu_memory_bytes;
        c.agree(
            "gpu_memory_bytes",
            gpu,
            gpu == self.gpu.memory_bytes,
            || format!("gpu.memory_bytes {}", self.gpu.memory_bytes),
        )?;
        let headroom = i128::from(gpu) - i128::from(total);
        c.agree(
            "headroom_bytes",
            self.headroom_bytes,
            i128::from(self.headroom_bytes) == headroom,
            || format!("gpu_memory_bytes {gpu} less total_bytes {total}, {headroom}"),
        )?;
        c.agree("fits", self.fits, self.fits == (total <= gpu), || {
            format!("total_bytes {total} against gpu_memory_bytes {gpu}")
        })
    }
}

impl Ranges for vram_plan::capacity::Capacity {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // vLLM's `gpu_memory_utilization` or SGLang's `mem_fraction_static`.
        c.num("memory_fraction", self.memory_fraction, Range::FRACTION)?;
        c.num("max_concurrency", self.max_concurrency, Range::RATIO)?;
        // The engines' own limits, each at least 1 (`vllm/engine/arg_utils.py`,
        // SGLang's `server_args.py`), and a page of at least one token.
        c.int("max_model_len", self.max_model_len, AT_LEAST_1)?;
        c.int("max_num_seqs", self.max_num_seqs, AT_LEAST_1)?;
        c.int(
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            AT_LEAST_1,
        )?;
        c.each("kv_groups", &self.kv_groups, |c, g| {
            c.int("block_size", g.block_size, AT_LEAST_1)
        })?;
        // The budget is a share of the device (`vram_plan::capacity::vllm`, `sglang`), and the
        // KV cache what the budget leaves.
        c.agree(
            "budget_bytes",
            self.budget_bytes,
            self.budget_bytes <= self.total_bytes,
            || {
                format!(
                    "total_bytes {}, the device it is a share of",
                    self.total_bytes
                )
            },
        )?;
        c.agree(
            "kv_cache_bytes",
            self.kv_cache_bytes,
            self.kv_cache_bytes <= self.budget_bytes,
            || {
                format!(
                    "budget_bytes {}, which it is carved from",
                    self.budget_bytes
                )
            },
        )?;
        let (fit, len) = (self.max_model_len_that_fits, self.max_model_len);
        c.agree("max_model_len_that_fits", fit, fit <= len, || {
            format!("max_model_len {len}, the longest it is searched to")
        })?;
        // vLLM starts only where one request of `max_model_len` fits (`vllm.rs`: `starts`);
        // SGLang starts with a pool shorter than the context.
        let vllm = self.engine == vram_plan::capacity::Engine::Vllm;
        c.agree(
            "max_model_len_that_fits",
            fit,
            !(vllm && self.starts) || fit == len,
            || format!("starts true under vLLM, which needs max_model_len {len} to fit"),
        )
    }
}

impl Ranges for vram_plan::suggest::ServingChange {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.num("max_concurrency", self.max_concurrency, Range::RATIO)
    }
}

impl Ranges for vram_plan::batching::Batches {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // Real tokens over padded tokens.
        c.num("fill", self.fill, Range::FRACTION)
    }
}

impl Ranges for vram_plan::checkpoint::Stage {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.num("forward", self.forward, Range::COST)?;
        c.num("backward", self.backward, Range::COST)
    }
}

impl Ranges for vram_plan::lora::FtPlan {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.num("flops_per_gpu", self.flops_per_gpu, Range::FLOPS)
    }
}

impl Ranges for vram_alloc::replay::PolicyResult {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // Reserved but not allocated, over reserved, at the reserved peak.
        c.num("fragmentation", self.fragmentation, Range::FRACTION)
    }
}

/// Checks every integer of a report's JSON against [`MAX_INTEGER`] (and 0, but for the
/// [`SIGNED`] fields).
///
/// # Errors
/// [`Error::OutOfRange`] naming the first integer out of its range.
pub fn integers(v: &Value) -> Result<()> {
    walk(v, &mut Vec::new(), None)
}

fn walk(v: &Value, path: &mut Vec<String>, key: Option<&str>) -> Result<()> {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(k.clone());
                let r = walk(x, path, Some(k));
                path.pop();
                r?;
            }
            Ok(())
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let last = path.pop();
                let seg = format!("{}[{i}]", last.as_deref().unwrap_or(""));
                path.push(seg);
                let r = walk(x, path, key);
                path.pop();
                if let Some(l) = last {
                    path.push(l);
                }
                r?;
            }
            Ok(())
        }
        Value::Number(n) if n.is_u64() || n.is_i64() => {
            let signed = key.is_some_and(|k| SIGNED.contains(&k));
            let ok = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_INTEGER,
                (None, Some(i)) => signed && i.unsigned_abs() <= MAX_INTEGER,
                (None, None) => false,
            };
            if ok {
                return Ok(());
            }
            let range = if signed {
                "from -2^53 to 2^53"
            } else if n.is_i64() && !n.is_u64() {
                "at least 0"
            } else {
                "at most 2^53"
            };
            Err(Error::OutOfRange {
                path: path.join("."),
                value: n.to_string(),
                range: range.into(),
            })
        }
        _ => Ok(()),
    }
}
