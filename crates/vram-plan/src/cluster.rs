//! What the job runs on: the GPU, how many, and how they are connected.
//!
//! Bandwidths are *achievable bus bandwidths per GPU* in GB/s (10⁹ bytes/s), the figure NCCL's
//! `nccl-tests` report as `busbw` for large messages, not the marketing link rate:
//!
//! - NVLink 3 / NVSwitch (DGX A100): 600 GB/s bidirectional = 300 GB/s each way per GPU;
//!   nccl-tests all-reduce reaches about 230 GB/s busbw on a DGX A100 (NVIDIA DGX A100 user
//!   guide and nccl-tests results). We use 230.
//! - NVLink 4 (DGX H100 / HGX H200): 900 GB/s bidirectional, 450 GB/s each way; about 360 GB/s
//!   busbw measured. We use 360.
//! - InfiniBand: DGX A100 has 8 × 200 Gb/s HDR ConnectX-6 (one per GPU, 25 GB/s raw); DGX H100
//!   8 × 400 Gb/s NDR (50 GB/s raw). Across nodes NCCL reaches about 80 % of it: 20 and 40.
//! - PCIe: Gen4 x16 is 32 GB/s raw, about 25 achieved for host↔device copies of pinned memory;
//!   Gen5 about 50. GeForce cards have no peer-to-peer, so intra-node collectives go through the
//!   host at roughly PCIe speed shared by the GPUs behind a switch: we use 10 GB/s busbw for
//!   8 × RTX 4090. Between such nodes: 100 Gb/s Ethernet per node, 12.5 GB/s shared by 8 GPUs,
//!   about 1.2 GB/s per GPU achieved.

use serde::Serialize;
use vram_model::gpu::{self, Gpu};

use crate::error::{Error, Result};

/// A cluster: `gpus` copies of one GPU, in nodes of `gpus_per_node`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cluster {
    /// The GPU.
    pub gpu: &'static Gpu,
    /// GPUs in the job.
    pub gpus: u64,
    /// GPUs per node (tensor parallelism stays inside a node).
    pub gpus_per_node: u64,
    /// Achievable collective bus bandwidth per GPU inside a node, GB/s.
    pub intra_gb_s: f64,
    /// Achievable collective bus bandwidth per GPU between nodes, GB/s.
    pub inter_gb_s: f64,
    /// Host memory per node available for offload, bytes.
    pub host_memory_bytes: u64,
    /// Host↔device bandwidth per GPU, GB/s (offload).
    pub pcie_gb_s: f64,
    /// Human name of the interconnect, for output.
    pub fabric: &'static str,
}

/// A named cluster shape; the GPU count comes from the user.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// Preset name as typed on the command line.
    pub name: &'static str,
    /// GPU catalog id.
    pub gpu: &'static str,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// See [`Cluster::intra_gb_s`].
    pub intra_gb_s: f64,
    /// See [`Cluster::inter_gb_s`].
    pub inter_gb_s: f64,
    /// Host memory per node, GiB.
    pub host_gib: u64,
    /// See [`Cluster::pcie_gb_s`].
    pub pcie_gb_s: f64,
    /// Interconnect description.
    pub fabric: &'static str,
}

/// The built-in presets (figures: see the module docs; host memory from each system's
/// datasheet: DGX A100 2 TB, DGX H100 2 TB, HGX H200 reference 2 TB).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "dgx-a100-80g",
        gpu: "a100-80g",
        gpus_per_node: 8,
        intra_gb_s: 230.0,
        inter_gb_s: 20.0,
        host_gib: 2048,
        pcie_gb_s: 25.0,
        fabric: "NVSwitch, 8x200Gb/s IB",
    },
    Preset {
        name: "dgx-h100",
        gpu: "h100-80g",
        gpus_per_node: 8,
        intra_gb_s: 360.0,
        inter_gb_s: 40.0,
        host_gib: 2048,
        pcie_gb_s: 50.0,
        fabric: "NVSwitch, 8x400Gb/s IB",
    },
    Preset {
        name: "hgx-h200",
        gpu: "h200",
        gpus_per_node: 8,
        intra_gb_s: 360.0,
        inter_gb_s: 40.0,
        host_gib: 2048,
        pcie_gb_s: 50.0,
        fabric: "NVSwitch, 8x400Gb/s IB",
    },
    Preset {
        name: "8x-rtx4090",
        gpu: "rtx-4090",
        gpus_per_node: 8,
        intra_gb_s: 10.0,
        inter_gb_s: 1.2,
        host_gib: 256,
        pcie_gb_s: 25.0,
        fabric: "PCIe 4.0 (no P2P), 100Gb/s Ethernet",
    },
    Preset {
        name: "workstation",
        gpu: "rtx-4090",
        gpus_per_node: 1,
        intra_gb_s: 25.0,
        inter_gb_s: 1.2,
        host_gib: 128,
        pcie_gb_s: 25.0,
        fabric: "single GPU, PCIe 4.0",
    },
];

/// Looks up a preset by name.
pub fn preset(name: &str) -> Result<&'static Preset> {
    let lower = name.to_ascii_lowercase();
    PRESETS
        .iter()
        .find(|p| p.name == lower)
        .ok_or_else(|| Error::UnknownCluster {
            name: name.into(),
            known: PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

impl Cluster {
    /// A preset with `gpus` GPUs, optionally of another GPU than the preset's.
    pub fn from_preset(p: &Preset, gpu_name: Option<&str>, gpus: u64) -> Result<Cluster> {
        let gpu = gpu::lookup(gpu_name.unwrap_or(p.gpu))?;
        check_gpus(gpus)?;
        Ok(Cluster {
            gpu,
            gpus,
            gpus_per_node: p.gpus_per_node.min(gpus),
            intra_gb_s: p.intra_gb_s,
            inter_gb_s: p.inter_gb_s,
            host_memory_bytes: p.host_gib << 30,
            pcie_gb_s: p.pcie_gb_s,
            fabric: p.fabric,
        })
    }

    /// The default cluster for a GPU: data-centre GPUs (A100, H100 SXM, H200, MI300X) in
    /// DGX-class nodes of 8 with NVSwitch and one 200 Gb/s (A100) or 400 Gb/s (H100/H200)
    /// InfiniBand port per GPU; other GPUs in PCIe nodes of 8 (or fewer when `gpus < 8`).
    pub fn for_gpu(gpu_name: &str, gpus: u64) -> Result<Cluster> {
        let gpu = gpu::lookup(gpu_name)?;
        let preset_name = match gpu.id {
            "a100-40g" | "a100-80g" | "mi300x" => "dgx-a100-80g",
            "h100-80g" => "dgx-h100",
            "h200" => "hgx-h200",
            _ => "8x-rtx4090",
        };
        // The name as given, not the catalog id: a bare size (`23.58GiB`, id `custom`) and a
        // card with its own total (`t4:15636037632B`) are looked up again as what was given.
        Cluster::from_preset(preset(preset_name)?, Some(gpu_name), gpus)
    }

    /// Nodes used (the last may be partial).
    pub fn nodes(&self) -> u64 {
        self.gpus.div_ceil(self.gpus_per_node)
    }

    /// Bus bandwidth of a collective over `n` ranks spaced `stride` ranks apart (ranks are
    /// numbered node by node): intra-node when the group fits in one node; across nodes, the
    /// `stride` groups that run side by side share the node's links, so a group with `k`
    /// members in each node gets `k` GPUs' worth of inter-node bandwidth (NCCL runs one ring
    /// per NIC), never more than the intra-node bandwidth.
    pub fn group_gb_s(&self, n: u64, stride: u64) -> f64 {
        if n <= 1 || n.saturating_mul(stride) <= self.gpus_per_node {
            self.intra_gb_s
        } else {
            let k = (self.gpus_per_node / stride.max(1)).clamp(1, n);
            (k as f64 * self.inter_gb_s).min(self.intra_gb_s)
        }
    }
}

fn check_gpus(gpus: u64) -> Result<()> {
    if gpus == 0 || gpus > 1 << 20 {
        return Err(Error::Request(format!(
            "--gpus {gpus} must be between 1 and {}",
            1u64 << 20
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_bandwidth_by_placement() {
        let c = Cluster::for_gpu("a100-80g", 64).unwrap();
        assert_eq!(c.gpus_per_node, 8);
        assert_eq!(c.nodes(), 8);
        // Inside a node: NVSwitch.
        assert_eq!(c.group_gb_s(8, 1), 230.0);
        assert_eq!(c.group_gb_s(4, 2), 230.0);
        // 64 consecutive ranks: 8 per node, 8 NICs' worth (8 × 20 = 160 GB/s).
        assert_eq!(c.group_gb_s(64, 1), 160.0);
        // One rank per node (stride 8, e.g. dp across tp = 8): one NIC.
        assert_eq!(c.group_gb_s(8, 8), 20.0);
        // Two per node (stride 4): two NICs.
        assert_eq!(c.group_gb_s(16, 4), 40.0);
    }

    #[test]
    fn small_jobs_are_one_node_and_presets_resolve() {
        let c = Cluster::for_gpu("h100", 4).unwrap();
        assert_eq!((c.gpus_per_node, c.nodes()), (4, 1));
        let w = Cluster::from_preset(preset("workstation").unwrap(), None, 1).unwrap();
        assert_eq!(w.gpu.id, "rtx-4090");
        assert!(preset("dgx-z").is_err());
        assert!(Cluster::for_gpu("a100", 0).is_err());
    }
}
