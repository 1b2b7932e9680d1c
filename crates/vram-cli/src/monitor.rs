//! Glue shared by `top`, `record`, `serve` and `report`: choosing the source,
//! parsing intervals, the wall clock, and how errors become exit codes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vram_monitor::{MonitorError, NvmlSource, SimulatedSource, Source};

/// Where samples come from.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Use a simulated machine (two GPUs, four processes, one leaking)
    /// instead of the NVIDIA driver.
    #[arg(long)]
    pub demo: bool,
}

/// A source that can move to a sampling thread.
pub type BoxSource = Box<dyn Source + Send>;

/// Open the simulated source with `--demo`, NVML otherwise. Without a driver
/// this fails with [`MonitorError::NvmlUnavailable`] (exit code 2).
pub fn open_source(args: &SourceArgs) -> anyhow::Result<BoxSource> {
    if args.demo {
        // Start past the training job's warm-up, as if it had been running.
        Ok(Box::new(SimulatedSource::demo().starting_at(30)))
    } else {
        Ok(Box::new(NvmlSource::new()?))
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Parse a count of samples or requests: a whole number, at least 1.
pub fn parse_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

/// Parse `100ms`, `1s`, `2.5s`, `1m` or a bare number of seconds; at least
/// 10 ms and at most one hour.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 100ms, 1s or 2.5s"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (use ms, s or m)")),
    };
    if !(0.01..=3600.0).contains(&secs) {
        return Err(format!("interval `{s}` must be between 10ms and 1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The user's input or environment is wrong: exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Exit code for an error returned by a subcommand: 2 for bad input
/// ([`BadInput`], or a [`MonitorError`] that [`MonitorError::is_bad_input`]),
/// 0 for a broken pipe (`vram top --json | head`), 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.downcast_ref::<BadInput>().is_some() {
            return 2;
        }
        if let Some(m) = cause.downcast_ref::<MonitorError>() {
            if m.is_bad_input() {
                return 2;
            }
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return 0;
            }
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_with_units_and_reject_nonsense() {
        assert_eq!(parse_interval("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_interval("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_interval("3"), Ok(Duration::from_secs(3)));
        assert!(parse_interval("1ms").is_err());
        assert!(parse_interval("fast").is_err());
        assert!(parse_interval("5h").is_err());
    }

    #[test]
    fn exit_codes_follow_the_error_kind() {
        let bad = anyhow::Error::new(BadInput("x".into()));
        assert_eq!(exit_code(&bad), 2);
        let nvml = anyhow::Error::new(MonitorError::NvmlUnavailable { reason: "r".into() });
        assert_eq!(exit_code(&nvml.context("opening source")), 2);
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(exit_code(&pipe), 0);
        assert_eq!(exit_code(&anyhow::anyhow!("bug")), 1);
    }
}
