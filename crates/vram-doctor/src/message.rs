//! PyTorch's CUDA out-of-memory message, parsed.
//!
//! The caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! `DeviceCachingAllocator::malloc`) raises `torch.OutOfMemoryError`
//! (`torch.cuda.OutOfMemoryError` before 2.5) with one of two layouts:
//!
//! * PyTorch 1.x and 2.0: `CUDA out of memory. Tried to allocate S (GPU d;
//!   T total capacity; A already allocated; F free; [L allowed; ]R reserved
//!   in total by PyTorch) If reserved memory is >> allocated memory try setting
//!   max_split_size_mb ...` (before 1.10: `R cached)`);
//! * PyTorch 2.1 and later: `CUDA out of memory. Tried to allocate S. GPU d
//!   has a total capacity of T of which F is free. ` then, from NVML, one
//!   `Process P has X memory in use. ` per process on the device, this one
//!   written `Including non-PyTorch memory, this process has X memory in use. `,
//!   then `[L allowed; ]Of the allocated memory A is allocated by PyTorch,
//!   [with G allocated in private pools (e.g., CUDA Graphs), ]and U is reserved
//!   by PyTorch but unallocated.` and a hint (2.1: `max_split_size_mb`; 2.2
//!   and later: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`). 2.1
//!   spelled it `total capacty`.
//!
//! Sizes are `format_size`'s: `N bytes` up to 1 KiB, else two decimals of
//! KiB, MiB or GiB (binary units). [`parse`] finds the message anywhere in
//! its input (a whole traceback is fine) and reads every figure.

use serde::Serialize;

use crate::{DoctorError, Result};

/// Another process on the device, as the message lists it (from NVML).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageProcess {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds, bytes.
    pub bytes: u64,
}

/// Which layout the message had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// PyTorch 1.x / 2.0: `(GPU 0; ... total capacity; ... already allocated; ...)`.
    Legacy,
    /// PyTorch 2.1 and later: `GPU 0 has a total capacity of ... of which ... is free.`
    Current,
}

/// Every figure of an out-of-memory message, in bytes. Figures are exact to
/// the message's rounding (two decimals of the unit printed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomMessage {
    /// The layout the figures were read from.
    pub layout: Layout,
    /// The request that failed (after PyTorch's rounding).
    pub requested_bytes: u64,
    /// CUDA device index.
    pub device: u32,
    /// Device memory as `cudaMemGetInfo` reports it.
    pub total_bytes: u64,
    /// Free device memory when the request failed.
    pub free_bytes: u64,
    /// Bytes in live tensors (`memory_allocated()`), CUDA-graph pools included.
    pub allocated_bytes: u64,
    /// Bytes the caching allocator holds (`memory_reserved()`).
    pub reserved_bytes: u64,
    /// The pid NVML gave this process when the message listed it as
    /// `Process N` (a container: another pid namespace).
    pub self_pid_in_list: Option<u32>,
    /// Of `allocated_bytes`, what private pools (CUDA graphs) hold (2.7+ messages).
    pub private_pool_bytes: Option<u64>,
    /// The per-process cap from `set_per_process_memory_fraction`, when set.
    pub allowed_bytes: Option<u64>,
    /// This process's device memory as NVML reports it (PyTorch plus the CUDA
    /// context and libraries); `None` when the message does not say.
    pub this_process_bytes: Option<u64>,
    /// The other processes on the device (2.1+ messages, when NVML works).
    pub other_processes: Vec<MessageProcess>,
}

impl OomMessage {
    /// Reserved by PyTorch but not in any live tensor: free blocks in its cache.
    pub fn reserved_unallocated_bytes(&self) -> u64 {
        self.reserved_bytes.saturating_sub(self.allocated_bytes)
    }

    /// What this process holds outside PyTorch's allocator (CUDA context,
    /// cuBLAS/cuDNN, NCCL, other allocators), when the message says.
    pub fn non_pytorch_bytes(&self) -> Option<u64> {
        self.this_process_bytes
            .map(|p| p.saturating_sub(self.reserved_bytes))
    }

    /// Bytes the other processes listed hold.
    pub fn other_process_bytes(&self) -> u64 {
        self.other_processes.iter().map(|p| p.bytes).sum()
    }
}

/// One size as `format_size` prints it: `123 bytes`, `1.50 KiB`, `20.00 MiB`,
/// `79.19 GiB` (also `TiB`, and `B`/`KB`-style units for tolerance).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_once(' ')?;
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let mult: f64 = match unit.trim() {
        "bytes" | "byte" | "B" => 1.0,
        "KiB" | "KB" => 1024.0,
        "MiB" | "MB" => 1024.0 * 1024.0,
        "GiB" | "GB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "TB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let b = (v * mult).round();
    (b < 1.8e19).then_some(b as u64)
}

/// Reads a size at the start of `s` (number, space, unit); returns it and the rest.
fn size_prefix(s: &str) -> Option<(u64, &str)> {
    let s = s.trim_start();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|&i| i > 0)?;
    let rest = s[num_end..].strip_prefix(' ')?;
    let unit_end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let size = parse_size(&format!("{} {}", &s[..num_end], &rest[..unit_end]))?;
    Some((size, &rest[unit_end..]))
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

fn field(s: &str, pat: &str, what: &str) -> Result<u64> {
    after(s, pat)
        .and_then(size_prefix)
        .map(|(v, _)| v)
        .ok_or_else(|| unparseable(format!("no size after `{}` ({what})", pat.trim())))
}

fn unparseable(reason: String) -> DoctorError {
    DoctorError::Unparseable { reason }
}

const START: &str = "out of memory. Tried to allocate ";

/// Finds and parses the out-of-memory message in `text`.
///
/// # Errors
/// [`DoctorError::Unparseable`] naming what is missing: no message at all
/// (with a word on the CUDA runtime's own `CUDA error: out of memory`, which
/// carries no figures), or a message whose figures cannot be read.
///
/// ```
/// let m = vram_doctor::message::parse(
///     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a \
///      total capacity of 79.19 GiB of which 6.75 MiB is free. Including non-PyTorch memory, \
///      this process has 79.17 GiB memory in use. Of the allocated memory 77.65 GiB is \
///      allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.",
/// ).unwrap();
/// assert_eq!(m.requested_bytes, 20 << 20);
/// assert_eq!(m.reserved_unallocated_bytes(), 1_095_216_660);
/// ```
pub fn parse(text: &str) -> Result<OomMessage> {
    // Line breaks (wrapped logs) become spaces and runs of spaces collapse;
    // a log prefix in brackets at the start of a line (`[rank0]:`) goes.
    let flat: String = text
        .lines()
        .map(|l| {
            let l = l.trim_start();
            match (l.starts_with('['), l.find("]:")) {
                (true, Some(i)) => &l[i + 2..],
                _ => l,
            }
        })
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ");
    let Some(start) = flat.find(START) else {
        let reason = if flat.contains("CUDA error: out of memory") {
            "this is the CUDA runtime's `CUDA error: out of memory` (a kernel, library or context \
             allocation outside PyTorch's allocator): it carries no figures; paste the \
             `CUDA out of memory. Tried to allocate ...` message instead"
                .to_string()
        } else {
            "no PyTorch out-of-memory message (`CUDA out of memory. Tried to allocate ...`) found"
                .to_string()
        };
        return Err(unparseable(reason));
    };
    let msg = &flat[start + START.len()..];
    let (requested_bytes, rest) =
        size_prefix(msg).ok_or_else(|| unparseable("no size after `Tried to allocate`".into()))?;
    if let Some(r) = rest.strip_prefix(" (GPU ") {
        return legacy(requested_bytes, r);
    }
    let r = rest.strip_prefix(". GPU ").ok_or_else(|| {
        unparseable(
            "neither `. GPU n has a total capacity` (2.1+) nor `(GPU n;` (2.0) after the request"
                .into(),
        )
    })?;
    let device = leading_u32(r).ok_or_else(|| unparseable("no GPU index".into()))?;
    let total_bytes = match after(r, " has a total capacity of ") {
        Some(_) => field(r, " has a total capacity of ", "device total")?,
        None => field(r, " has a total capacty of ", "device total")?,
    };
    let free_bytes = field(r, " of which ", "free memory")?;
    let mut other_processes = Vec::new();
    let mut this_process_bytes = None;
    let mut cursor = after(r, " is free. ").unwrap_or("");
    loop {
        if let Some(p) = cursor.strip_prefix("Including non-PyTorch memory, this process has ") {
            let (v, rest) =
                size_prefix(p).ok_or_else(|| unparseable("no size for this process".into()))?;
            this_process_bytes = Some(this_process_bytes.unwrap_or(0) + v);
            cursor = rest.strip_prefix(" memory in use. ").unwrap_or(rest);
        } else if let Some(p) = cursor.strip_prefix("Process ") {
            let pid = leading_u32(p).ok_or_else(|| unparseable("no pid after `Process`".into()))?;
            let (v, rest) = after(p, " has ")
                .and_then(size_prefix)
                .ok_or_else(|| unparseable(format!("no size for process {pid}")))?;
            other_processes.push(MessageProcess { pid, bytes: v });
            cursor = rest.strip_prefix(" memory in use. ").unwrap_or(rest);
        } else {
            break;
        }
    }
    // In a container NVML's pids are the host's, so PyTorch does not
    // recognise itself and lists this process as `Process N`: with no
    // `this process` entry, the listed process holding at least PyTorch's
    // reservation is this one.
    let self_in_list = this_process_bytes.is_none() && !other_processes.is_empty();
    let allowed_bytes = size_prefix(cursor)
        .filter(|(_, rest)| rest.starts_with(" allowed;"))
        .map(|(v, _)| v);
    let allocated_bytes = field(r, "Of the allocated memory ", "allocated by PyTorch")?;
    let private_pool_bytes = after(r, " is allocated by PyTorch, with ")
        .and_then(size_prefix)
        .map(|(v, _)| v);
    let unallocated = after(r, " is allocated by PyTorch, ")
        .and_then(|s| after(s, "and "))
        .and_then(size_prefix)
        .filter(|(_, rest)| rest.starts_with(" is reserved by PyTorch but unallocated"))
        .map(|(v, _)| v)
        .ok_or_else(|| unparseable("no `... is reserved by PyTorch but unallocated`".into()))?;
    // Both 2.1's (allocated, reserved - allocated) and 2.7+'s (allocated
    // + private, reserved - allocated - private) sum to reserved.
    let reserved_bytes = allocated_bytes.saturating_add(unallocated);
    let mut self_pid = None;
    if self_in_list {
        if let Some(i) = other_processes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.bytes >= reserved_bytes)
            .max_by_key(|(_, p)| p.bytes)
            .map(|(i, _)| i)
        {
            let me = other_processes.remove(i);
            this_process_bytes = Some(me.bytes);
            self_pid = Some(me.pid);
        }
    }
    Ok(OomMessage {
        layout: Layout::Current,
        requested_bytes,
        device,
        total_bytes,
        free_bytes,
        allocated_bytes,
        reserved_bytes,
        self_pid_in_list: self_pid,
        private_pool_bytes,
        allowed_bytes,
        this_process_bytes,
        other_processes,
    })
}

fn leading_u32(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

fn legacy(requested_bytes: u64, r: &str) -> Result<OomMessage> {
    let device = leading_u32(r).ok_or_else(|| unparseable("no GPU index".into()))?;
    let r = after(r, "; ").ok_or_else(|| unparseable("no `;` after the GPU index".into()))?;
    let (total_bytes, rest) = size_prefix(r)
        .filter(|(_, rest)| rest.starts_with(" total capacity;"))
        .ok_or_else(|| unparseable("no `... total capacity;`".into()))?;
    let rest = &rest[" total capacity;".len()..];
    let (allocated_bytes, rest) = size_prefix(rest)
        .filter(|(_, rest)| rest.starts_with(" already allocated;"))
        .ok_or_else(|| unparseable("no `... already allocated;`".into()))?;
    let rest = &rest[" already allocated;".len()..];
    let (free_bytes, mut rest) = size_prefix(rest)
        .filter(|(_, rest)| rest.starts_with(" free;"))
        .ok_or_else(|| unparseable("no `... free;`".into()))?;
    rest = &rest[" free;".len()..];
    let mut allowed_bytes = None;
    if let Some((v, r2)) = size_prefix(rest).filter(|(_, r2)| r2.starts_with(" allowed;")) {
        allowed_bytes = Some(v);
        rest = &r2[" allowed;".len()..];
    }
    let (reserved_bytes, tail) = size_prefix(rest)
        .filter(|(_, t)| t.starts_with(" reserved in total by PyTorch") || t.starts_with(" cached"))
        .ok_or_else(|| unparseable("no `... reserved in total by PyTorch)`".into()))?;
    let _ = tail;
    Ok(OomMessage {
        layout: Layout::Legacy,
        requested_bytes,
        device,
        total_bytes,
        free_bytes,
        allocated_bytes,
        reserved_bytes,
        self_pid_in_list: None,
        private_pool_bytes: None,
        allowed_bytes,
        this_process_bytes: None,
        other_processes: Vec::new(),
    })
}
