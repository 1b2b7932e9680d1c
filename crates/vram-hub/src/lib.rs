//! Model files from the Hugging Face Hub and ModelScope, for `vram estimate Qwen/Qwen3-8B`.
//!
//! [`open`] resolves a repo id and revision to a commit (one request; none when the commit's
//! files are cached or `HF_HUB_OFFLINE=1`), then [`Repo::text`] reads `config.json` (and any
//! other small file) and [`Repo::safetensors_header`] a checkpoint shard's header by two HTTP
//! `Range` requests, the 8-byte length and then the header, never the weights.
//!
//! Files go to, and are read from, the caches people already have: huggingface_hub's
//! (`HF_HUB_CACHE`, `models--org--name/{blobs,refs,snapshots}`, whatever `from_pretrained`
//! downloaded, read with no request; what vram downloads is what `hf_hub_download` reads)
//! and ModelScope's (`MODELSCOPE_CACHE`). Headers are kept apart, in vram's own cache keyed
//! by commit and file ETag, so that no loader takes a header for the shard.
//!
//! The environment is huggingface_hub's: `HF_ENDPOINT`, `HF_TOKEN` or the token file of
//! `huggingface-cli login`, `HF_HUB_OFFLINE`, `HF_HOME`/`HF_HUB_CACHE`, `HF_HUB_ETAG_TIMEOUT`
//! and `HF_HUB_DOWNLOAD_TIMEOUT`; proxies from `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`/
//! `NO_PROXY`; CA bundles from `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` or `SSL_CERT_FILE`
//! (else webpki's Mozilla roots; TLS is always verified). The token is sent only to the
//! endpoint's own scheme, host and port: never across a redirect to another host (the CDN),
//! never in a message.
//!
//! ```no_run
//! let cfg = vram_hub::Config::from_env(vram_hub::Hub::HuggingFace)?;
//! let mut repo = vram_hub::open(&cfg, "Qwen/Qwen3-8B", None)?;
//! let config = repo.text("config.json")?;
//! let index = repo.optional_text("model.safetensors.index.json")?;
//! let first = repo.safetensors_header("model-00001-of-00005.safetensors")?;
//! # Ok::<(), vram_hub::Error>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cache;
mod env;
mod error;
mod http;
mod modelscope;
mod repo;

#[cfg(feature = "fake")]
pub mod fake;

pub use env::{hf_folder, hf_home, Config, Hub, Token};
pub use error::{Error, Result};
pub use http::Traffic;
pub use repo::{is_repo_id, open, Repo, Shard, MAX_TEXT};

/// Largest safetensors header accepted (the format's own limit, 100 MB).
pub const MAX_HEADER: u64 = 100_000_000;
