//! The one error type of `vram-model`.

/// Everything that can go wrong while reading a model description or checking a setup.
///
/// Every variant is a problem with the caller's input: the CLI maps all of them to exit code 2.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The input is not valid JSON (or is empty, truncated or binary).
    #[error("{what} is not valid JSON: {reason}")]
    Json {
        /// What was being parsed (`config.json`, `safetensors header`, ...).
        what: String,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// A required field is absent.
    #[error("config.json has no `{field}` (needed for model_type `{model_type}`)")]
    MissingField {
        /// The field's name.
        field: String,
        /// The `model_type` being read.
        model_type: String,
    },
    /// A field has the wrong JSON type.
    #[error("config.json field `{field}` should be {expected}, found {found}")]
    WrongType {
        /// The field's name.
        field: String,
        /// The expected JSON type.
        expected: &'static str,
        /// What was there instead.
        found: String,
    },
    /// A numeric field or setting is zero, negative or absurdly large.
    #[error("{field} = {value} is out of range: {why}")]
    OutOfRange {
        /// The field or flag.
        field: String,
        /// The offending value as written.
        value: String,
        /// The allowed range.
        why: String,
    },
    /// `model_type` is missing or not one vramkit understands.
    #[error("unknown model_type `{0}` (known: {known})", known = crate::read::known_model_types().collect::<Vec<_>>().join(", "))]
    UnknownModelType(String),
    /// Two sizes that must divide do not.
    #[error("{what}: {a} is not divisible by {b}")]
    NotDivisible {
        /// What the two numbers are.
        what: String,
        /// The dividend.
        a: u64,
        /// The divisor.
        b: u64,
    },
    /// A catalog lookup failed.
    #[error("unknown {kind} `{}` (known: {known})", clip(name))]
    Unknown {
        /// `model` or `GPU`.
        kind: &'static str,
        /// What the user wrote.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The setup is inconsistent (e.g. sequence parallelism without tensor parallelism).
    #[error("invalid setup: {0}")]
    Setup(String),
    /// An unknown `model_type` whose config carries a key a generic decoder cannot honour.
    #[error("model_type `{model_type}` is not known and its `{field}` needs a family reader (a generic decoder does not read it)")]
    Undescribable {
        /// The key.
        field: String,
        /// The unknown `model_type`.
        model_type: String,
    },
    /// A `model_type` (or a class of it) whose modules vram does not describe.
    #[error("model_type `{model_type}` cannot be described: {what}")]
    NotDescribed {
        /// The `model_type`.
        model_type: String,
        /// What is not modelled.
        what: String,
    },
    /// A safetensors header could not be read.
    #[error("safetensors header: {0}")]
    Safetensors(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the user wrote, cut to 80 characters for a one-line message (the length said).
fn clip(s: &str) -> String {
    const MAX: usize = 80;
    let n = s.chars().count();
    if n <= MAX {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}… ({n} characters)")
}
