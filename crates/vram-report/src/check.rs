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
        if !name.is_empty() {
            self.path.push(name.to_string());
        }
        let path = self.path_string();
        if !name.is_empty() {
            self.path.pop();
        }
        Error::OutOfRange { path, value, range }
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

/// The floats of the types other crates define that a report holds, described here (their
/// crates do not know the reports): `vram_model`'s `Setup`, `vram_plan`'s `Capacity`,
/// `ServingChange`, `Batches`, `Stage` and `FtPlan`, and `vram_alloc`'s `PolicyResult`.
impl Ranges for vram_model::setup::Setup {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.at("overheads", |c| {
            c.opt(
                "fragmentation",
                self.overheads.fragmentation,
                FRAGMENTATION_FLAG,
            )
        })
    }
}

impl Ranges for vram_plan::capacity::Capacity {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // vLLM's `gpu_memory_utilization` or SGLang's `mem_fraction_static`.
        c.num("memory_fraction", self.memory_fraction, Range::FRACTION)?;
        c.num("max_concurrency", self.max_concurrency, Range::RATIO)
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
