//! The one error type of `vram-report`.

/// Everything that can go wrong while building or reading a report. Every variant is a problem
/// with the caller's input (a flag, a model, a file): the CLI maps all of them to exit code 2.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The memory model refused the model or the setup.
    #[error(transparent)]
    Model(#[from] vram_model::Error),
    /// The planner or the serving model refused the request.
    #[error(transparent)]
    Plan(#[from] vram_plan::Error),
    /// A request the flags describe cannot be answered (a combination of flags, a flag that does
    /// not apply to the model), one line naming the flag.
    #[error("{0}")]
    Input(String),
    /// A file given to `vram report` is none of the kinds it renders.
    #[error("{reason}")]
    Unrecognised {
        /// Why, in one line.
        reason: String,
    },
    /// A figure of a report read back (`vram report`) that is outside its range: a negative
    /// size or time, a share above 1, an integer beyond 2^53 (the `check` module's rules).
    #[error("{path} is {value}, out of range: {range}")]
    OutOfRange {
        /// Its JSON path (`plans[0].mfu`).
        path: String,
        /// Its value, as the JSON wrote it.
        value: String,
        /// The range it must be in, in words.
        range: String,
    },
    /// A figure of a report read back that is in its range but disagrees with the report's
    /// other fields: a total that is not its parts' sum, a plan whose parallel degrees do not
    /// multiply to its GPUs (the `check` module's rules).
    #[error("{path} is {value}, inconsistent with {with}")]
    Inconsistent {
        /// Its JSON path (`plans[0].tp`).
        path: String,
        /// Its value, as the JSON wrote it.
        value: String,
        /// What it disagrees with, and that field's figure, in words.
        with: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for an [`Error::Input`].
pub(crate) fn input(msg: impl Into<String>) -> Error {
    Error::Input(msg.into())
}

/// What a report that runs the caching allocator (`vram replay`, `vram trace`) can fail on:
/// the request, or the allocator (whose own errors say whether the input was bad,
/// `vram_alloc::AllocError::is_bad_input`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request or the model.
    #[error(transparent)]
    Report(#[from] Error),
    /// The allocator, or the snapshot it read.
    #[error(transparent)]
    Alloc(#[from] vram_alloc::AllocError),
    /// A walk that broke its own invariant (a bug, not bad input).
    #[error("{0}")]
    Internal(String),
}

impl From<vram_model::Error> for RunError {
    fn from(e: vram_model::Error) -> Self {
        RunError::Report(e.into())
    }
}
