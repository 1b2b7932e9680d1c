//! Process rows for tables: flatten, filter, sort.

use crate::Sample;

/// One process on one GPU, ready to display.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRow {
    /// GPU index.
    pub gpu: u32,
    /// Process id.
    pub pid: u32,
    /// Owner.
    pub user: String,
    /// Command line.
    pub command: String,
    /// GPU memory in bytes (`None`: not reported).
    pub bytes: Option<u64>,
    /// Share of the GPU's installed memory held by the process, 0.0 to 1.0.
    pub share: f64,
}

/// Column to sort process rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// GPU memory (default, largest first).
    #[default]
    Memory,
    /// Process id.
    Pid,
    /// Owner.
    User,
    /// GPU index.
    Gpu,
    /// Command line.
    Command,
}

impl SortKey {
    /// The next key, cycling; used by the `s` key in `vram top`.
    pub fn next(self) -> Self {
        match self {
            SortKey::Memory => SortKey::Pid,
            SortKey::Pid => SortKey::User,
            SortKey::User => SortKey::Gpu,
            SortKey::Gpu => SortKey::Command,
            SortKey::Command => SortKey::Memory,
        }
    }

    /// Lower-case name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Memory => "memory",
            SortKey::Pid => "pid",
            SortKey::User => "user",
            SortKey::Gpu => "gpu",
            SortKey::Command => "command",
        }
    }

    /// Parse a name from [`SortKey::name`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            SortKey::Memory,
            SortKey::Pid,
            SortKey::User,
            SortKey::Gpu,
            SortKey::Command,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// True when `filter` (case-insensitive substring) matches the row's pid,
/// user or command. An empty filter matches everything.
pub fn matches(row: &ProcessRow, filter: &str) -> bool {
    if filter.is_empty() {
        return true;
    }
    let f = filter.to_lowercase();
    row.pid.to_string().contains(&f)
        || row.user.to_lowercase().contains(&f)
        || row.command.to_lowercase().contains(&f)
}

/// All processes of `sample`, filtered and sorted. `descending` reverses the
/// natural order (memory is naturally largest first, the rest ascending).
/// Ties are broken by GPU then pid so the order is stable between samples.
pub fn rows(sample: &Sample, filter: &str, key: SortKey, descending: bool) -> Vec<ProcessRow> {
    let mut out: Vec<ProcessRow> = sample
        .gpus
        .iter()
        .flat_map(|g| {
            g.processes.iter().map(move |p| ProcessRow {
                gpu: g.index,
                pid: p.pid,
                user: p.user.clone(),
                command: p.command.clone(),
                bytes: p.gpu_memory_bytes,
                share: match (p.gpu_memory_bytes, g.memory_total_bytes) {
                    (Some(b), t) if t > 0 => b as f64 / t as f64,
                    _ => 0.0,
                },
            })
        })
        .filter(|r| matches(r, filter))
        .collect();
    out.sort_by(|a, b| {
        let primary = match key {
            SortKey::Memory => b.bytes.cmp(&a.bytes),
            SortKey::Pid => a.pid.cmp(&b.pid),
            SortKey::User => a.user.cmp(&b.user),
            SortKey::Gpu => a.gpu.cmp(&b.gpu),
            SortKey::Command => a.command.cmp(&b.command),
        };
        let primary = if descending {
            primary.reverse()
        } else {
            primary
        };
        primary.then(a.gpu.cmp(&b.gpu)).then(a.pid.cmp(&b.pid))
    });
    out
}

/// Bytes in binary units with one decimal, e.g. `38.0 GiB`, `512.0 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
