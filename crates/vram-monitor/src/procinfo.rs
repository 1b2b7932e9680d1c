//! Owner and command line of a process, from `/proc` on Linux.
//!
//! Parsing is split from reading so the parsers can be tested on fixed text.
//! A process in another PID namespace (a container) is simply unknown (`?`).

use std::collections::HashMap;

/// Parse `/etc/passwd` text into uid → login name. Malformed lines are skipped.
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let _pw = f.next()?;
            let uid = f.next()?.parse().ok()?;
            (!name.is_empty()).then(|| (uid, name.to_string()))
        })
        .collect()
}

/// The real uid from `/proc/<pid>/status` text (`Uid:` line, first field).
pub fn parse_status_uid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
}

/// `/proc/<pid>/cmdline` bytes (NUL-separated) as one space-separated line.
/// Returns `None` for an empty command line (kernel threads, zombies).
pub fn parse_cmdline(bytes: &[u8]) -> Option<String> {
    let parts: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// Looks up process owners and command lines, caching the user table.
#[derive(Debug, Default)]
pub struct ProcessNames {
    users: Option<HashMap<u32, String>>,
}

impl ProcessNames {
    /// A lookup with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// `(user, command)` for `pid`; `?` for whatever cannot be read.
    pub fn lookup(&mut self, pid: u32) -> (String, String) {
        let base = format!("/proc/{pid}");
        let command = std::fs::read(format!("{base}/cmdline"))
            .ok()
            .and_then(|b| parse_cmdline(&b))
            .or_else(|| {
                std::fs::read_to_string(format!("{base}/comm"))
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "?".into());
        let user = std::fs::read_to_string(format!("{base}/status"))
            .ok()
            .and_then(|s| parse_status_uid(&s))
            .map(|uid| {
                let users = self.users.get_or_insert_with(|| {
                    std::fs::read_to_string("/etc/passwd")
                        .map(|t| parse_passwd(&t))
                        .unwrap_or_default()
                });
                users.get(&uid).cloned().unwrap_or_else(|| uid.to_string())
            })
            .unwrap_or_else(|| "?".into());
        (user, command)
    }
}
