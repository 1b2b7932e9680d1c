//! The one error type of `vram-plan`.

/// Everything that can go wrong while planning. Every variant is a problem with the caller's
/// input: the CLI maps all of them to exit code 2.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The memory model rejected the model or a setup.
    #[error(transparent)]
    Model(#[from] vram_model::Error),
    /// A cluster preset name is not known.
    #[error("unknown cluster `{name}` (known: {known})")]
    UnknownCluster {
        /// What the user wrote.
        name: String,
        /// The known presets, comma-separated.
        known: String,
    },
    /// The request is inconsistent (pinned degrees that do not multiply to the GPU count, ...).
    #[error("invalid plan request: {0}")]
    Request(String),
    /// A serving-capacity knob is out of range or does not fit the model.
    #[error("{0}")]
    Capacity(String),
    /// The planner only models this kind of model for some features.
    #[error("{what} needs a transformer model; `{model}` is not one")]
    NotTransformer {
        /// The feature.
        what: &'static str,
        /// The model's name.
        model: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
