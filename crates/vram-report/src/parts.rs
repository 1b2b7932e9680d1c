//! The pieces the reports share: the GPU, byte maps in display order, the versions followed,
//! serving speed, the timeline.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::check::{Checker, Range, Ranges};
use crate::error::Result;

/// The name serde gives a unit enum value (`deepspeed`, `bf16-amp`).
pub(crate) fn name_of<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// The GPU an answer is for (`vram gpus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRef {
    /// The catalog id (`h100-80g`), or the bare size given.
    pub id: String,
    /// Its name as the vendor writes it.
    pub name: String,
    /// Its memory, bytes, as PyTorch's `total_memory` reports it.
    pub memory_bytes: u64,
}

impl GpuRef {
    /// The GPU as a sentence names it beside its memory ([`vram_model::gpu::Gpu::with_memory`]).
    pub fn with_memory(&self) -> String {
        vram_model::gpu::named_with_memory(&self.id, &self.name, self.memory_bytes)
    }
}

impl Ranges for GpuRef {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // Every verdict divides by it.
        c.at_least_1("memory_bytes", self.memory_bytes)
    }
}

impl From<&vram_model::gpu::Gpu> for GpuRef {
    fn from(g: &vram_model::gpu::Gpu) -> Self {
        GpuRef {
            id: g.id.to_string(),
            name: g.name.to_string(),
            memory_bytes: g.memory_bytes,
        }
    }
}

/// Bytes by name, in the order they were added (a JSON object whose keys keep that order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<(String, u64)>);

impl Bytes {
    /// The bytes of `key`, 0 where absent.
    pub fn get(&self, key: &str) -> u64 {
        self.0.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
    }
    /// The entries.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

impl From<&vram_model::estimate::Breakdown> for Bytes {
    fn from(b: &vram_model::estimate::Breakdown) -> Self {
        Bytes(b.iter().map(|(c, n)| (c.name().to_string(), n)).collect())
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of byte counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Bytes, A::Error> {
                let mut v = Vec::new();
                while let Some((k, n)) = a.next_entry::<String, u64>()? {
                    v.push((k, n));
                }
                Ok(Bytes(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// The library versions an estimate follows (`vram_model::estimate::Assumes`): the
/// `models:` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assumes {
    /// PyTorch (allocator, autocast, SDPA dispatch, optimizers).
    pub torch: String,
    /// transformers, whose code the model follows (`null` for torchvision models).
    pub transformers: Option<String>,
    /// What of the model follows that version.
    pub follows: String,
    /// torchvision (ResNets).
    pub torchvision: Option<String>,
    /// CUDA of the context and workspace figures.
    pub cuda: String,
    /// The measurements the overheads and kernels are calibrated on.
    pub calibration: String,
}

impl From<&vram_model::estimate::Assumes> for Assumes {
    fn from(a: &vram_model::estimate::Assumes) -> Self {
        Assumes {
            torch: a.torch.into(),
            transformers: a.transformers.map(String::from),
            follows: a.follows.into(),
            torchvision: a.torchvision.map(String::from),
            cuda: a.cuda.into(),
            calibration: a.calibration.into(),
        }
    }
}

impl Assumes {
    /// One line naming every version (`vram estimate`'s `models:` line).
    pub fn line(&self) -> String {
        let lib = match (&self.transformers, &self.torchvision) {
            (Some(v), _) => format!("transformers {v}"),
            (None, Some(v)) => format!("torchvision {v}"),
            (None, None) => String::new(),
        };
        format!(
            "{lib} ({}), PyTorch {}, CUDA {}; calibrated on {}",
            self.follows, self.torch, self.cuda, self.calibration
        )
    }
}

/// Serving speed of an inference estimate's `generate` call (`vram_plan::generate::Serving`):
/// the planner's model of transformers' `generate`, its host work against its GPU work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Speed {
    /// `generate(max_new_tokens=1)`: the set-up on the host, then the prompt's forward, seconds.
    pub prefill_s: f64,
    /// Host seconds of the set-up before the prompt's forward.
    pub setup_s: f64,
    /// Host seconds of the prompt's forward.
    pub prefill_host_s: f64,
    /// GPU seconds of the prompt's forward.
    pub prefill_gpu_s: f64,
    /// One decode step (one token for every sequence), seconds: the larger of its GPU time and
    /// its host time, then the step's host sync.
    pub decode_token_s: f64,
    /// GPU time of a mean decode step, seconds.
    pub decode_gpu_s: f64,
    /// Bytes a mean decode step reads and writes.
    pub decode_bytes: f64,
    /// Host time of a decode step, seconds.
    pub decode_host_s: f64,
    /// Kernels one decode step launches.
    pub decode_kernels: f64,
    /// Python function calls and view operators of one decode step.
    pub decode_calls: f64,
    /// `gpu` or `host`: which side bounds a decode step.
    pub decode_bound: Bound,
    /// The whole `generate` call, seconds.
    pub generate_s: f64,
    /// Tokens generated per second over the batch while decoding.
    pub decode_tokens_per_s: f64,
    /// Whether this call's figures were checked against a measurement of the same model,
    /// batch and prompt on the same GPU.
    pub validated: bool,
    /// What the model was held to: the fitted host constant and the measurements checked.
    pub checks: String,
}

impl Ranges for Speed {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        for (name, v) in [
            ("prefill_s", self.prefill_s),
            ("setup_s", self.setup_s),
            ("prefill_host_s", self.prefill_host_s),
            ("prefill_gpu_s", self.prefill_gpu_s),
            ("decode_token_s", self.decode_token_s),
            ("decode_gpu_s", self.decode_gpu_s),
            ("decode_host_s", self.decode_host_s),
            ("generate_s", self.generate_s),
        ] {
            c.num(name, v, Range::SECONDS)?;
        }
        c.num("decode_bytes", self.decode_bytes, Range::BYTES)?;
        c.num("decode_kernels", self.decode_kernels, Range::COUNT)?;
        c.num("decode_calls", self.decode_calls, Range::COUNT)?;
        c.num("decode_tokens_per_s", self.decode_tokens_per_s, Range::RATE)
    }
}

/// Which side bounds a decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The GPU's bandwidth or FLOPs.
    Gpu,
    /// The host's kernel launches and Python calls.
    Host,
}

impl From<&vram_plan::generate::Serving> for Speed {
    fn from(s: &vram_plan::generate::Serving) -> Self {
        Speed {
            prefill_s: s.prefill_s,
            setup_s: s.setup_s,
            prefill_host_s: s.prefill_host_s,
            prefill_gpu_s: s.prefill_gpu_s,
            decode_token_s: s.decode_token_s,
            decode_gpu_s: s.decode_gpu_s,
            decode_bytes: s.decode_bytes,
            decode_host_s: s.decode_host_s,
            decode_kernels: s.decode_kernels,
            decode_calls: s.decode_calls,
            decode_bound: if s.decode_bound == "host" {
                Bound::Host
            } else {
                Bound::Gpu
            },
            generate_s: s.generate_s,
            decode_tokens_per_s: s.decode_tokens_per_s,
            validated: s.validated,
            checks: s.checks.to_string(),
        }
    }
}

/// A moment of the step (`vram_model::estimate::Phase`), as `--json` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// `setup`, `forward`, `loss`, `backward`, `optimizer`, `prefill` or `decode`.
    pub phase: PhaseKind,
    /// Micro-batch (forward, loss, backward).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro: Option<u32>,
    /// Layer on this GPU (forward, backward, prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// Generated token (decode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u32>,
}

/// The kind of a [`Phase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum PhaseKind {
    Setup,
    Forward,
    Loss,
    Backward,
    Optimizer,
    Prefill,
    Decode,
}

impl From<vram_model::estimate::Phase> for Phase {
    fn from(p: vram_model::estimate::Phase) -> Self {
        use vram_model::estimate::Phase as P;
        let none = Phase {
            phase: PhaseKind::Setup,
            micro: None,
            layer: None,
            token: None,
        };
        match p {
            P::Setup => none,
            P::Forward { micro, layer } => Phase {
                phase: PhaseKind::Forward,
                micro: Some(micro),
                layer: Some(layer),
                ..none
            },
            P::Loss { micro } => Phase {
                phase: PhaseKind::Loss,
                micro: Some(micro),
                ..none
            },
            P::Backward { micro, layer } => Phase {
                phase: PhaseKind::Backward,
                micro: Some(micro),
                layer: Some(layer),
                ..none
            },
            P::Optimizer => Phase {
                phase: PhaseKind::Optimizer,
                ..none
            },
            P::Prefill { layer } => Phase {
                phase: PhaseKind::Prefill,
                layer: Some(layer),
                ..none
            },
            P::Decode { token } => Phase {
                phase: PhaseKind::Decode,
                token: Some(token),
                ..none
            },
        }
    }
}

/// One point of the step's timeline (`--timeline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// The phase as the text prints it (`forward, micro-batch 0, layer 3`).
    pub label: String,
    /// The phase.
    pub phase: Phase,
    /// Live bytes when entering it.
    pub live_bytes: u64,
    /// The highest live bytes within it.
    pub high_bytes: u64,
}

/// A field that is absent for one kind of answer and may be null for the other
/// (`max_micro_batch` is absent from an inference estimate, null when no micro-batch fits).
pub(crate) mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}
