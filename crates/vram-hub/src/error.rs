//! The one error type of vram-hub: each variant is one line a user can act on.

use std::path::PathBuf;

/// What can go wrong reading a model from a hub.
///
/// Every message is one line, names the repo, and says what to do. None carries the token.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The argument is not a repo id (`org/name`, letters, digits, `-`, `_`, `.`).
    #[error("`{0}` is not a Hub repo id (org/name: letters, digits, '-', '_', '.')")]
    BadRepoId(String),
    /// The revision is no name git gives a branch, tag or commit (`git check-ref-format`).
    #[error("--revision `{0}` is not a branch, tag or commit name: {1}")]
    BadRevision(String, &'static str),
    /// The repo does not exist, or is private and no (valid) token was sent.
    #[error("{repo}: repo not found on {endpoint}{hint}", hint = if *.has_token { " (with the token given; check the name)" } else { " (if it is private, set HF_TOKEN or run `huggingface-cli login`)" })]
    RepoNotFound {
        /// The repo id.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// Whether a token was sent.
        has_token: bool,
    },
    /// The branch, tag or commit does not exist in the repo.
    #[error("{repo}: revision `{revision}` not found on {endpoint} (a branch, tag or commit of the repo)")]
    RevisionNotFound {
        /// The repo id.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The endpoint asked.
        endpoint: String,
    },
    /// A gated repo, and the request carried no token or one not granted access.
    #[error("{repo} is gated: {what}")]
    Gated {
        /// The repo id.
        repo: String,
        /// What to do, with the page where the licence is accepted.
        what: String,
    },
    /// The endpoint refused the token (wrong or expired).
    #[error("{endpoint} refused the token from {source_name} (invalid or expired): make a new one at {endpoint}/settings/tokens, or unset it for public repos")]
    BadToken {
        /// The endpoint asked.
        endpoint: String,
        /// Where the token came from (`HF_TOKEN`, the token file's path); never the token.
        source_name: String,
    },
    /// The repo has no config.json: what it holds instead.
    #[error("{repo}@{revision} has no config.json: {what}")]
    NoConfig {
        /// The repo id.
        repo: String,
        /// The revision.
        revision: String,
        /// What the repo is instead (GGUF files only, a diffusers pipeline, ...).
        what: String,
    },
    /// The network failed: the host cannot be reached, or did not answer in time.
    #[error("{repo}: cannot reach {endpoint}: {reason}; {hint}")]
    Network {
        /// The repo id.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// What failed (timed out after N s, connection refused, TLS, ...).
        reason: String,
        /// What the user can do instead.
        hint: String,
    },
    /// Offline (HF_HUB_OFFLINE=1), and the cache does not hold what is needed.
    #[error(
        "{repo}@{revision}: {file} is not in the cache {cache} and HF_HUB_OFFLINE is set; {hint}"
    )]
    OfflineNotCached {
        /// The repo id.
        repo: String,
        /// The revision.
        revision: String,
        /// The file that is missing.
        file: String,
        /// The cache folder looked in.
        cache: PathBuf,
        /// What to download, or how to point at a local folder.
        hint: String,
    },
    /// The server answered something no hub answers (a missing header, a bad range).
    #[error("{repo}: {url_path}: unexpected answer from {endpoint}: {what}")]
    Protocol {
        /// The repo id.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// The path asked for (never a query string with a signature).
        url_path: String,
        /// What was wrong.
        what: String,
    },
    /// The server failed (5xx, 429) on every try.
    #[error("{repo}: {endpoint} answered HTTP {status} to {tries} tries{detail}")]
    Server {
        /// The repo id.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// The last status.
        status: u16,
        /// How many requests were made.
        tries: u32,
        /// The server's `X-Error-Message`, if any.
        detail: String,
    },
    /// A setting from the environment is unusable (an unreadable CA bundle, a bad endpoint).
    #[error("{0}")]
    Setting(String),
    /// Reading or writing the cache failed.
    #[error("cache {path}: {source}")]
    Cache {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// vram-hub's result type.
pub type Result<T> = std::result::Result<T, Error>;
