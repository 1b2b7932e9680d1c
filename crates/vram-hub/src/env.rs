//! Settings from the environment people already have: the variables huggingface_hub and
//! ModelScope's SDK read, with the same defaults.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// Which hub a repo id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hub {
    /// The Hugging Face Hub (or a mirror named by `HF_ENDPOINT`).
    HuggingFace,
    /// ModelScope (`MODELSCOPE_DOMAIN`).
    ModelScope,
}

impl Hub {
    /// The name users write (`--hub huggingface`).
    pub fn name(self) -> &'static str {
        match self {
            Hub::HuggingFace => "huggingface",
            Hub::ModelScope => "modelscope",
        }
    }

    /// The revision a repo is read at when none is given (`main`; ModelScope's `master`).
    pub fn default_revision(self) -> &'static str {
        match self {
            Hub::HuggingFace => "main",
            Hub::ModelScope => "master",
        }
    }
}

/// An access token. It is sent only to its own endpoint; `Debug` never shows it.
#[derive(Clone)]
pub struct Token {
    secret: String,
    /// Where it came from (`HF_TOKEN`, or the token file's path), for messages.
    pub source: String,
}

impl Token {
    /// A token read from `source`.
    pub fn new(secret: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            secret: secret.into(),
            source: source.into(),
        }
    }

    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.secret)
    }

    /// Whether `text` contains the secret (for tests that check it never leaks).
    pub fn appears_in(&self, text: &str) -> bool {
        !self.secret.is_empty() && text.contains(&self.secret)
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(from {})", self.source)
    }
}

/// Everything a fetch needs to know about the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Which hub.
    pub hub: Hub,
    /// Base URL, no trailing slash (`https://huggingface.co`, `HF_ENDPOINT`).
    pub endpoint: String,
    /// The token for `endpoint`, if any (Hugging Face only).
    pub token: Option<Token>,
    /// Cache only, no request (`HF_HUB_OFFLINE=1`, `TRANSFORMERS_OFFLINE=1`,
    /// `MODELSCOPE_OFFLINE=1`).
    pub offline: bool,
    /// The hub's own cache: `HF_HUB_CACHE` (default `$HF_HOME/hub`) or ModelScope's
    /// `$MODELSCOPE_CACHE/models`.
    pub cache: PathBuf,
    /// vram's own cache of safetensors headers (`VRAM_CACHE`, default `~/.cache/vram`).
    pub header_cache: PathBuf,
    /// Limit for a metadata request (`HF_HUB_ETAG_TIMEOUT`, default 10 s).
    pub metadata_timeout: Duration,
    /// Limit for a file request (`HF_HUB_DOWNLOAD_TIMEOUT`, default 10 s).
    pub download_timeout: Duration,
    /// Tries of a request that failed transiently (a 5xx, 429, a reset connection).
    pub tries: u32,
    /// Pause before the second try (doubled for each later one).
    pub backoff: Duration,
    /// Root certificates from `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` or `SSL_CERT_FILE`
    /// (None: webpki's Mozilla roots), with the variable that named them.
    pub ca_bundle: Option<(String, Arc<Vec<ureq::tls::Certificate<'static>>>)>,
}

/// Reads one variable, treating an empty value as unset.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// huggingface_hub's `_is_true`: 1, ON, YES, TRUE in any case.
fn is_true(name: &str) -> bool {
    var(name).is_some_and(|v| {
        matches!(
            v.trim().to_ascii_uppercase().as_str(),
            "1" | "ON" | "YES" | "TRUE"
        )
    })
}

fn home() -> PathBuf {
    var("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// `$XDG_CACHE_HOME` or `~/.cache`.
fn cache_home() -> PathBuf {
    var("XDG_CACHE_HOME").map_or_else(|| home().join(".cache"), PathBuf::from)
}

/// `~` at the start of a path, as `os.path.expanduser` reads it.
fn expand(p: String) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => home().join(rest),
        None if p == "~" => home(),
        None => PathBuf::from(p),
    }
}

/// `HF_HOME`, default `$XDG_CACHE_HOME/huggingface`.
pub fn hf_home() -> PathBuf {
    var("HF_HOME").map_or_else(|| cache_home().join("huggingface"), expand)
}

fn seconds(name: &str, default: f64) -> Result<Duration> {
    match var(name) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e6 => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::Setting(format!(
                "{name}={v} is not a number of seconds"
            ))),
        },
    }
}

fn endpoint(name: &str, value: String) -> Result<String> {
    let e = value.trim().trim_end_matches('/').to_string();
    if !(e.starts_with("https://") || e.starts_with("http://")) || e.contains(char::is_whitespace) {
        return Err(Error::Setting(format!(
            "{name}={value} is not an http(s) URL (e.g. https://hf-mirror.com)"
        )));
    }
    Ok(e)
}

/// The token as huggingface_hub 2.4.0 finds it (`utils/_auth.py`, `get_token` without
/// OIDC or Colab): `HF_TOKEN` if set and not empty, else the older `HUGGING_FACE_HUB_TOKEN`;
/// cleaned by [`clean_token`]; if nothing is left, the file that `huggingface-cli login`
/// writes (`HF_TOKEN_PATH`, default `$HF_HOME/token`), cleaned the same way. A token still
/// not fit for an HTTP header after that is an error naming where it came from, never the
/// token itself.
fn hf_token() -> Result<Option<Token>> {
    // `os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")`: an empty
    // HF_TOKEN gives way, one of spaces or line breaks does not (it cleans to nothing).
    let env = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]
        .into_iter()
        .find_map(|n| {
            std::env::var(n)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (n, v))
        });
    let found = match env.and_then(|(n, v)| clean_token(&v).map(|t| (t, n.to_string()))) {
        Some(t) => Some(t),
        None => {
            let path = var("HF_TOKEN_PATH").map_or_else(|| hf_home().join("token"), expand);
            std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| clean_token(&text))
                .map(|t| (t, path.display().to_string()))
        }
    };
    let Some((secret, source)) = found else {
        return Ok(None);
    };
    let token = Token::new(secret, source);
    if ureq::http::HeaderValue::from_str(&token.bearer()).is_err() {
        return Err(Error::Setting(format!(
            "the token in {} holds a control character an HTTP header cannot carry \
             (only line breaks and surrounding spaces are removed): copy the token again, or unset it for public repos",
            token.source
        )));
    }
    Ok(Some(token))
}

/// huggingface_hub 2.4.0's `_clean_token` (`utils/_auth.py`): every CR and LF removed,
/// wherever it is (a token pasted across a line break), then the whitespace around it; an
/// empty result is no token. (Python's `str.strip` also takes U+001C..U+001F as space, which
/// Rust's `trim` keeps; those then fail the header check and are reported.)
fn clean_token(raw: &str) -> Option<String> {
    let t: String = raw.chars().filter(|&c| c != '\r' && c != '\n').collect();
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Root certificates from a PEM bundle named by the first of `REQUESTS_CA_BUNDLE`,
/// `CURL_CA_BUNDLE`, `SSL_CERT_FILE` that is set. A bundle that cannot be read, or holds no
/// certificate, is an error: never a silent fallback.
fn ca_bundle() -> Result<Option<(String, Arc<Vec<ureq::tls::Certificate<'static>>>)>> {
    let Some((name, path)) = ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"]
        .into_iter()
        .find_map(|n| var(n).map(|p| (n, p)))
    else {
        return Ok(None);
    };
    let pem = std::fs::read(expand(path.clone()))
        .map_err(|e| Error::Setting(format!("{name}={path}: cannot read the CA bundle: {e}")))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Setting(format!(
                    "{name}={path}: not a PEM CA bundle: {e}"
                )))
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::Setting(format!(
            "{name}={path} holds no PEM certificate"
        )));
    }
    Ok(Some((format!("{name}={path}"), Arc::new(certs))))
}

/// The folder ModelScope's SDK keeps models in: `$MODELSCOPE_CACHE/models` (default
/// `~/.cache/modelscope/hub/models`).
fn modelscope_cache() -> PathBuf {
    var("MODELSCOPE_CACHE")
        .map_or_else(|| home().join(".cache/modelscope/hub"), expand)
        .join("models")
}

impl Config {
    /// The settings for `hub` from the environment.
    pub fn from_env(hub: Hub) -> Result<Config> {
        let header_cache = var("VRAM_CACHE").map_or_else(|| cache_home().join("vram"), expand);
        let common = |endpoint, token, offline, cache| -> Result<Config> {
            Ok(Config {
                hub,
                endpoint,
                token,
                offline,
                cache,
                header_cache: header_cache.clone(),
                metadata_timeout: seconds("HF_HUB_ETAG_TIMEOUT", 10.0)?,
                download_timeout: seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10.0)?,
                tries: 3,
                backoff: Duration::from_millis(250),
                ca_bundle: ca_bundle()?,
            })
        };
        match hub {
            Hub::HuggingFace => {
                let endpoint = match var("HF_ENDPOINT") {
                    Some(e) => endpoint("HF_ENDPOINT", e)?,
                    None => "https://huggingface.co".into(),
                };
                let cache = var("HF_HUB_CACHE")
                    .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
                    .map_or_else(|| hf_home().join("hub"), expand);
                let offline = is_true("HF_HUB_OFFLINE") || is_true("TRANSFORMERS_OFFLINE");
                // Offline, nothing is sent: a token unfit for a header does not stop a cache read.
                let token = match hf_token() {
                    Err(_) if offline => None,
                    t => t?,
                };
                common(endpoint, token, offline, cache)
            }
            Hub::ModelScope => {
                // The SDK takes a host name (`MODELSCOPE_DOMAIN`, https); a full URL is taken
                // as it is (a mirror over plain http, the tests' loopback hub).
                let endpoint = match var("MODELSCOPE_DOMAIN") {
                    Some(d) if d.contains("://") => endpoint("MODELSCOPE_DOMAIN", d)?,
                    Some(d) => endpoint("MODELSCOPE_DOMAIN", format!("https://{}", d.trim()))?,
                    None => "https://www.modelscope.cn".into(),
                };
                let offline = is_true("MODELSCOPE_OFFLINE") || is_true("HF_HUB_OFFLINE");
                common(endpoint, None, offline, modelscope_cache())
            }
        }
    }

    /// Where a repo's files sit in the hub's own cache.
    pub fn repo_cache(&self, repo: &str) -> PathBuf {
        match self.hub {
            Hub::HuggingFace => self.cache.join(hf_folder(repo)),
            // ModelScope's SDK replaces '.' in the model name by '___'.
            Hub::ModelScope => {
                let (owner, name) = repo.split_once('/').unwrap_or(("", repo));
                self.cache.join(owner).join(name.replace('.', "___"))
            }
        }
    }

    /// vram's cache of this repo's safetensors headers.
    pub fn header_cache_of(&self, repo: &str) -> PathBuf {
        self.header_cache
            .join("safetensors-headers")
            .join(self.hub.name())
            .join(hf_folder(repo))
    }
}

/// `models--org--name`, huggingface_hub's `repo_folder_name`.
pub fn hf_folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

#[cfg(test)]
mod tests {
    use super::clean_token;

    #[test]
    fn a_token_is_cleaned_as_huggingface_hub_cleans_it() {
        // Line breaks anywhere go, then the spaces around; nothing left is no token.
        assert_eq!(clean_token("hf_ab\r\ncd\n").as_deref(), Some("hf_abcd"));
        assert_eq!(clean_token("  hf_abcd \t").as_deref(), Some("hf_abcd"));
        assert_eq!(clean_token(" \r\n\n "), None);
        // Inner spaces and tabs stay (huggingface_hub keeps them too).
        assert_eq!(clean_token("hf_a b\tc").as_deref(), Some("hf_a b\tc"));
    }
}
