use thiserror::Error;

/// Everything that can go wrong in `vram-monitor`.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MonitorError {
    /// NVML could not be loaded or initialised (no NVIDIA driver, no
    /// `libnvidia-ml.so.1`, or no permission).
    #[error("no NVIDIA GPU monitoring available: {reason} (use --demo for a simulated GPU)")]
    NvmlUnavailable {
        /// What NVML or the loader said.
        reason: String,
    },
    /// An NVML call failed while sampling.
    #[error("NVML call {call} failed: {message}")]
    Nvml {
        /// The NVML query that failed.
        call: &'static str,
        /// NVML's description of the failure.
        message: String,
    },
    /// A recording line could not be parsed.
    #[error("line {line}: not a vram sample: {message}")]
    BadRecordLine {
        /// 1-based line number in the input.
        line: usize,
        /// What was wrong with it.
        message: String,
    },
    /// A simulated scenario is inconsistent (for example a process on a GPU
    /// that does not exist).
    #[error("invalid scenario: {reason}")]
    InvalidScenario {
        /// What is inconsistent.
        reason: String,
    },
    /// The file `vram record` was asked to append to holds something other than a recording
    /// (a config, a log): it is left as it is.
    #[error("{path} is not a vram recording ({reason}): nothing was written to it; give a new file or a recording to append to")]
    NotARecording {
        /// The file.
        path: String,
        /// What its start holds instead of a sample.
        reason: String,
    },
    /// An I/O error while writing or reading a timeline.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl MonitorError {
    /// True when the error is the user's input or environment rather than a bug
    /// or a transient failure: the CLI maps these to exit code 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            MonitorError::NvmlUnavailable { .. }
                | MonitorError::BadRecordLine { .. }
                | MonitorError::InvalidScenario { .. }
                | MonitorError::NotARecording { .. }
        ) || matches!(
            self,
            // The file the user chose is on a full disk or over a quota: theirs to change.
            MonitorError::Io { source, .. } if matches!(
                source.kind(),
                std::io::ErrorKind::StorageFull
                    | std::io::ErrorKind::QuotaExceeded
                    | std::io::ErrorKind::FileTooLarge
            )
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        MonitorError::Io {
            context: context.into(),
            source,
        }
    }
}
