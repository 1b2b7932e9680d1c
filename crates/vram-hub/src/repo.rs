//! One repo at one commit: `open` resolves the revision (at most one request), then files
//! and safetensors headers come from the cache or, once, from the hub.

use ureq::http::Method;

use crate::cache::{self, normalize_etag, HeaderCache, HfCache};
use crate::env::{hf_folder, Config, Hub};
use crate::error::{Error, Result};
use crate::http::{path_of, Answer, Http, NetFailure, Traffic};
use crate::{modelscope, MAX_HEADER};

/// Largest JSON file read (config.json, an index, a processor config: a few KiB to a few MiB).
pub const MAX_TEXT: u64 = 16 << 20;

/// A safetensors file as far as its header tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The file name in the repo.
    pub file: String,
    /// The first 8 bytes (the header's length, little-endian) and the JSON header.
    pub header: Vec<u8>,
    /// The whole file's size in bytes.
    pub size: u64,
}

/// Refuses a revision git could not name (`git check-ref-format`'s rules that matter here):
/// the revision becomes a path under the cache's `refs/` (as in huggingface_hub), so
/// `../../x` would write the commit outside the cache, and an empty one asks for nothing.
/// `refs/pr/1` (a pull request's ref) passes.
pub fn check_revision(r: &str) -> Result<()> {
    let why = if r.is_empty() {
        "it is empty"
    } else if r.len() > 255 {
        "longer than 255 bytes"
    } else if r
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'\\')
    {
        "it holds a space, a backslash or a control character"
    } else if r.split('/').any(|c| c.is_empty() || c.starts_with('.')) {
        "a part of it is empty or starts with `.` (`..`, `/x`, `x//y`)"
    } else if r.contains("..") || r.contains("@{") || r.ends_with(".lock") {
        "git refuses `..`, `@{` and a `.lock` ending"
    } else {
        return Ok(());
    };
    Err(Error::BadRevision(r.to_string(), why))
}

/// Whether `id` is a repo id as the Hub takes it: `name` or `org/name`, each part letters,
/// digits, `-`, `_`, `.`, not starting or ending with `-` or `.`, no `--` or `..`, at most
/// 96 characters.
pub fn is_repo_id(id: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
            && !p.contains("--")
            && !p.contains("..")
    };
    id.len() <= 96
        && match id.split_once('/') {
            Some((org, name)) => part_ok(org) && part_ok(name),
            None => part_ok(id),
        }
}

/// Percent-encodes a revision for a URL path (`refs/pr/1` → `refs%2Fpr%2F1`).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where the network stands for this repo.
#[derive(Debug, Clone)]
pub(crate) enum Link {
    /// Requests may be made.
    Up,
    /// `HF_HUB_OFFLINE=1`: none.
    Offline,
    /// The revision request failed; the cache answered it. Holds the reason.
    Down(String),
}

/// A repo resolved to one commit.
#[derive(Debug)]
pub struct Repo {
    pub(crate) cfg: Config,
    pub(crate) http: Http,
    /// The repo id as given.
    pub id: String,
    /// The revision as given (or the hub's default branch).
    pub revision: String,
    /// The commit the revision resolved to (ModelScope: the revision).
    pub commit: String,
    pub(crate) link: Link,
    pub(crate) hf: HfCache,
    pub(crate) headers: HeaderCache,
    /// ModelScope: the repo's files at the revision, with their sizes and sha256.
    pub(crate) listing: Option<Vec<modelscope::Listed>>,
    notes: Vec<String>,
}

/// Opens `id` at `revision` (default: the hub's default branch) on the hub `cfg` names.
///
/// With a commit hash whose config.json is cached, no request is made; with a branch or tag,
/// one (`HEAD` of config.json, which carries `X-Repo-Commit`), or none offline.
pub fn open(cfg: &Config, id: &str, revision: Option<&str>) -> Result<Repo> {
    if !is_repo_id(id) || (cfg.hub == Hub::ModelScope && !id.contains('/')) {
        return Err(Error::BadRepoId(id.to_string()));
    }
    if let Some(r) = revision {
        check_revision(r)?;
    }
    let revision = revision.unwrap_or(cfg.hub.default_revision()).to_string();
    let mut repo = Repo {
        http: Http::new(cfg),
        cfg: cfg.clone(),
        id: id.to_string(),
        commit: revision.clone(),
        revision,
        link: if cfg.offline { Link::Offline } else { Link::Up },
        hf: HfCache::new(&cfg.cache, &hf_folder(id)),
        headers: HeaderCache::new(cfg.header_cache_of(id)),
        listing: None,
        notes: Vec::new(),
    };
    match cfg.hub {
        Hub::HuggingFace => repo.resolve_hf()?,
        Hub::ModelScope => modelscope::resolve(&mut repo)?,
    }
    Ok(repo)
}

impl Repo {
    /// Notes for the user (the cache answered because the network failed, a renamed repo).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Requests made and bytes received so far.
    pub fn traffic(&self) -> Traffic {
        self.http.traffic()
    }

    /// `id@short commit`, for messages.
    pub fn label(&self) -> String {
        if cache::is_commit(&self.commit) {
            format!("{}@{}", self.id, &self.commit[..7])
        } else {
            format!("{}@{}", self.id, self.commit)
        }
    }

    pub(crate) fn note(&mut self, n: String) {
        self.notes.push(n);
    }

    pub(crate) fn url(&self, rev: &str, file: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            self.cfg.endpoint,
            self.id,
            encode(rev),
            file
        )
    }

    /// What to do when the network is not there: download the files elsewhere, or point at
    /// a local folder.
    pub(crate) fn hint(&self) -> String {
        match self.cfg.hub {
            Hub::HuggingFace => format!(
                "download it where there is network (`huggingface-cli download {} config.json --revision {}`, plus the *.safetensors.index.json for the checkpoint's cross-check) and copy the cache ({}), or pass a local folder holding its config.json",
                self.id,
                self.revision,
                self.cfg.cache.display()
            ),
            Hub::ModelScope => format!(
                "download it where there is network (`modelscope download --model {} config.json`) into MODELSCOPE_CACHE, or pass a local folder holding its config.json",
                self.id
            ),
        }
    }

    pub(crate) fn net_error(&self, f: NetFailure) -> Error {
        Error::Network {
            repo: self.id.clone(),
            endpoint: self.cfg.endpoint.clone(),
            reason: f.reason,
            hint: self.hint(),
        }
    }

    /// The error for a file that is not cached when no request can be made.
    pub(crate) fn not_cached(&self, file: &str) -> Error {
        match &self.link {
            Link::Down(reason) => Error::Network {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                reason: format!("{reason}, and {file} is not cached"),
                hint: self.hint(),
            },
            _ => Error::OfflineNotCached {
                repo: self.id.clone(),
                revision: self.revision.clone(),
                file: file.to_string(),
                cache: self.cfg.cache.clone(),
                hint: self.hint(),
            },
        }
    }

    fn is_entry_not_found(a: &Answer) -> bool {
        a.status == 404 && matches!(a.header("x-error-code"), None | Some("EntryNotFound"))
    }

    /// The error a Hub status means (huggingface_hub's `hf_raise_for_status`, by
    /// `X-Error-Code`).
    pub(crate) fn status_error(&self, a: &Answer, what: &str) -> Error {
        let code = a.header("x-error-code").unwrap_or("");
        let message = a.header("x-error-message").unwrap_or("").to_string();
        let repo = self.id.clone();
        let endpoint = self.cfg.endpoint.clone();
        match (a.status, code) {
            (_, "GatedRepo") => Error::Gated {
                what: match &self.cfg.token {
                    None => format!(
                        "accept its licence at {endpoint}/{repo} and set HF_TOKEN (or run `huggingface-cli login`)"
                    ),
                    Some(t) => format!(
                        "the token from {} has not been granted access; accept the licence at {endpoint}/{repo} with that account",
                        t.source
                    ),
                },
                repo,
            },
            (_, "RepoNotFound") => Error::RepoNotFound {
                repo,
                endpoint,
                has_token: self.cfg.token.is_some(),
            },
            (_, "RevisionNotFound") => Error::RevisionNotFound {
                repo,
                revision: self.revision.clone(),
                endpoint,
            },
            (401, _) => match &self.cfg.token {
                Some(t) => Error::BadToken {
                    endpoint,
                    source_name: t.source.clone(),
                },
                None => Error::RepoNotFound {
                    repo,
                    endpoint,
                    has_token: false,
                },
            },
            (s, _) if s >= 500 || s == 429 => Error::Server {
                repo,
                endpoint,
                status: s,
                tries: self.cfg.tries,
                detail: if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                },
            },
            (s, _) => Error::Protocol {
                repo,
                endpoint,
                url_path: what.to_string(),
                what: format!(
                    "HTTP {s}{}",
                    if message.is_empty() {
                        String::new()
                    } else {
                        format!(" ({message})")
                    }
                ),
            },
        }
    }

    /// Resolves a Hugging Face revision to its commit.
    fn resolve_hf(&mut self) -> Result<()> {
        let rev = self.revision.clone();
        if cache::is_commit(&rev) && self.hf.pointer(&rev, "config.json").is_file() {
            return Ok(());
        }
        let cached = if cache::is_commit(&rev) {
            Some(rev.clone())
        } else {
            self.hf.read_ref(&rev)
        };
        if let Link::Offline = self.link {
            self.commit = cached.ok_or_else(|| self.not_cached("config.json"))?;
            return Ok(());
        }
        let url = self.url(&rev, "config.json");
        let a = match self.http.fetch(Method::HEAD, &url, None, 0, false, true) {
            Ok(a) => a,
            Err(f) => {
                // As huggingface_hub does: with the network down, the cached ref answers.
                return match cached {
                    Some(c) if self.hf.pointer(&c, "config.json").is_file() => {
                        self.note(format!(
                            "cannot reach {} ({}); using the cached {}@{} ({})",
                            self.cfg.endpoint,
                            f.reason,
                            self.id,
                            rev,
                            &c[..7]
                        ));
                        self.commit = c;
                        self.link = Link::Down(f.reason);
                        Ok(())
                    }
                    _ => Err(self.net_error(f)),
                };
            }
        };
        if Self::is_entry_not_found(&a) {
            // The repo and revision exist (else the code says so) but hold no config.json.
            if let Some(c) = a.header("x-repo-commit") {
                if cache::is_commit(c) {
                    let c = c.to_string();
                    self.hf.mark_no_exist(&c, "config.json")?;
                }
            }
            return Err(self.no_config());
        }
        if !matches!(a.status, 200..=299 | 301 | 302 | 303 | 307 | 308) {
            return Err(self.status_error(&a, "config.json"));
        }
        let Some(commit) = a.header("x-repo-commit").map(str::to_string) else {
            return Err(Error::Protocol {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                url_path: path_of(&url),
                what: "no X-Repo-Commit header (not a Hugging Face Hub endpoint? HF_ENDPOINT names the Hub or a mirror)".into(),
            });
        };
        if !cache::is_commit(&commit) {
            return Err(Error::Protocol {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                url_path: path_of(&url),
                what: format!("X-Repo-Commit `{commit}` is not a commit hash"),
            });
        }
        let asked = format!("/{}/resolve/", self.id);
        if !path_of(&a.url).contains(&asked) {
            let path = path_of(&a.url);
            let now = path
                .split("/resolve/")
                .next()
                .unwrap_or("")
                .trim_start_matches('/');
            self.note(format!("{} has moved to {now}", self.id));
        }
        self.hf.write_ref(&rev, &commit)?;
        self.commit = commit;
        Ok(())
    }

    /// What a repo without config.json is, from the Hub's file list.
    fn no_config(&self) -> Error {
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.cfg.endpoint,
            self.id,
            encode(&self.revision)
        );
        let files: Vec<String> = self
            .http
            .fetch(Method::GET, &url, None, MAX_TEXT, false, true)
            .ok()
            .filter(|a| a.status == 200)
            .and_then(|a| serde_json::from_slice::<serde_json::Value>(&a.body).ok())
            .and_then(|v| {
                v.get("siblings")?.as_array().map(|s| {
                    s.iter()
                        .filter_map(|f| f.get("rfilename")?.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default();
        Error::NoConfig {
            repo: self.id.clone(),
            revision: self.revision.clone(),
            what: what_it_is(&files),
        }
    }

    /// A JSON or text file of the repo (config.json, an index), from the cache or fetched
    /// into it; `None` when the repo has no such file.
    pub fn optional_text(&mut self, file: &str) -> Result<Option<String>> {
        let bytes = match self.cfg.hub {
            Hub::HuggingFace => self.hf_file(file)?,
            Hub::ModelScope => modelscope::file(self, file)?,
        };
        bytes
            .map(|b| {
                String::from_utf8(b).map_err(|_| Error::Protocol {
                    repo: self.id.clone(),
                    endpoint: self.cfg.endpoint.clone(),
                    url_path: file.to_string(),
                    what: "not UTF-8 text".into(),
                })
            })
            .transpose()
    }

    /// A file the repo must have (config.json): its absence says what the repo is instead.
    pub fn text(&mut self, file: &str) -> Result<String> {
        match self.optional_text(file)? {
            Some(t) => Ok(t),
            None if file == "config.json" => Err(match self.cfg.hub {
                Hub::HuggingFace => self.no_config(),
                Hub::ModelScope => modelscope::no_config(self),
            }),
            None => Err(Error::Protocol {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                url_path: file.to_string(),
                what: "the file is not in the repo".into(),
            }),
        }
    }

    fn hf_file(&mut self, file: &str) -> Result<Option<Vec<u8>>> {
        let pointer = self.hf.pointer(&self.commit, file);
        if let Some(b) = cache::read_limited(&pointer, MAX_TEXT + 1)? {
            return self.within_limit(file, b).map(Some);
        }
        if self.hf.no_exist(&self.commit, file) {
            return Ok(None);
        }
        if !matches!(self.link, Link::Up) {
            return Err(self.not_cached(file));
        }
        let url = self.url(&self.commit, file);
        let a = self
            .http
            .fetch(Method::GET, &url, None, MAX_TEXT + 1, true, false)
            .map_err(|f| self.net_error(f))?;
        if Self::is_entry_not_found(&a) {
            self.hf.mark_no_exist(&self.commit, file)?;
            return Ok(None);
        }
        if a.status != 200 {
            return Err(self.status_error(&a, file));
        }
        let etag = a
            .header("x-linked-etag")
            .or_else(|| a.header("etag"))
            .map(normalize_etag)
            .filter(|e| !e.is_empty() && !e.contains(['/', '\\']))
            .ok_or_else(|| Error::Protocol {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                url_path: path_of(&url),
                what: "no ETag (the cache keys files by it)".into(),
            })?;
        let body = self.within_limit(file, a.body)?;
        self.hf.store(&self.commit, file, &etag, &body)?;
        Ok(Some(body))
    }

    fn within_limit(&self, file: &str, b: Vec<u8>) -> Result<Vec<u8>> {
        if b.len() as u64 > MAX_TEXT {
            return Err(Error::Protocol {
                repo: self.id.clone(),
                endpoint: self.cfg.endpoint.clone(),
                url_path: file.to_string(),
                what: format!("larger than {} MiB; a config is a few KiB", MAX_TEXT >> 20),
            });
        }
        Ok(b)
    }

    /// A safetensors file's header: from the file itself when the hub's cache holds it
    /// (`from_pretrained` downloaded it), from vram's header cache, or by two `Range`
    /// requests (the first 8 bytes, then the header), never the weights. `None` when the
    /// repo has no such file.
    pub fn safetensors_header(&mut self, file: &str) -> Result<Option<Shard>> {
        let local = match self.cfg.hub {
            Hub::HuggingFace => self.hf.pointer(&self.commit, file),
            Hub::ModelScope => self.cfg.repo_cache(&self.id).join(file),
        };
        if let Some((header, size)) = cache::local_header(&local)? {
            if self.cfg.hub == Hub::HuggingFace || modelscope::local_ok(self, file, size) {
                return Ok(Some(Shard {
                    file: file.to_string(),
                    header,
                    size,
                }));
            }
        }
        if let Some((header, size)) = self.headers.get(&self.commit, file) {
            return Ok(Some(Shard {
                file: file.to_string(),
                header,
                size,
            }));
        }
        let (url, known) = match self.cfg.hub {
            Hub::HuggingFace => {
                if self.hf.no_exist(&self.commit, file) {
                    return Ok(None);
                }
                (self.url(&self.commit, file), None)
            }
            Hub::ModelScope => match modelscope::listed(self, file) {
                Some(l) => (modelscope::file_url(self, file), Some(l)),
                None if self.listing.is_some() => return Ok(None),
                None => (modelscope::file_url(self, file), None),
            },
        };
        if let Some(l) = &known {
            if let Some(header) = self.headers.blob(&l.sha256) {
                self.headers
                    .put(&self.commit, file, &l.sha256, &header, l.size)?;
                return Ok(Some(Shard {
                    file: file.to_string(),
                    header,
                    size: l.size,
                }));
            }
        }
        if !matches!(self.link, Link::Up) {
            return Err(self.not_cached(file));
        }
        let first = self
            .http
            .fetch(Method::GET, &url, Some((0, 7)), 8, true, false)
            .map_err(|f| self.net_error(f))?;
        if Self::is_entry_not_found(&first) {
            if self.cfg.hub == Hub::HuggingFace {
                self.hf.mark_no_exist(&self.commit, file)?;
            }
            return Ok(None);
        }
        if !matches!(first.status, 200 | 206) {
            return Err(self.status_error(&first, file));
        }
        let bad = |what: String| Error::Protocol {
            repo: self.id.clone(),
            endpoint: self.cfg.endpoint.clone(),
            url_path: file.to_string(),
            what,
        };
        // The whole file's size: Content-Range's total, else what the Hub said of the file.
        let size = first
            .headers
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(|r| r.rsplit('/').next()?.trim().parse::<u64>().ok())
            .or_else(|| first.header("x-linked-size")?.trim().parse().ok())
            .or_else(|| {
                (first.status == 200)
                    .then(|| {
                        first
                            .headers
                            .get("content-length")?
                            .to_str()
                            .ok()?
                            .parse()
                            .ok()
                    })
                    .flatten()
            })
            .or(known.as_ref().map(|l| l.size))
            .ok_or_else(|| {
                bad("no Content-Range or X-Linked-Size: the file's size is unknown".into())
            })?;
        let etag = known
            .as_ref()
            .map(|l| l.sha256.clone())
            .or_else(|| {
                first
                    .header("x-linked-etag")
                    .or_else(|| first.header("etag"))
                    .map(normalize_etag)
            })
            .filter(|e| !e.is_empty() && !e.contains(['/', '\\']))
            .ok_or_else(|| bad("no ETag (the header cache keys files by it)".into()))?;
        if first.body.len() != 8 {
            return Err(bad(format!(
                "{} bytes where the 8-byte header length was asked",
                first.body.len()
            )));
        }
        let n = u64::from_le_bytes(first.body[..8].try_into().unwrap_or([0; 8]));
        if n == 0 || n > MAX_HEADER || 8 + n > size {
            return Err(bad(format!(
                "header length {n} does not fit the {size}-byte file; not a safetensors file?"
            )));
        }
        // Ask the URL that answered (a CDN's signed URL: no second trip through the Hub, and
        // no token, which stays with its endpoint).
        let second = match self.http.fetch(
            Method::GET,
            &first.url,
            Some((8, 8 + n - 1)),
            n,
            true,
            false,
        ) {
            Ok(a) if a.status == 206 || a.status == 200 => a,
            Ok(a) if first.url != url => {
                // The signed URL expired: through the Hub again.
                let _ = a;
                self.http
                    .fetch(Method::GET, &url, Some((8, 8 + n - 1)), n, true, false)
                    .map_err(|f| self.net_error(f))?
            }
            Ok(a) => return Err(self.status_error(&a, file)),
            Err(f) => return Err(self.net_error(f)),
        };
        if !matches!(second.status, 200 | 206) {
            return Err(self.status_error(&second, file));
        }
        if second.status == 200 {
            return Err(bad(
                "the server ignored the Range request; refusing to download the weights".into(),
            ));
        }
        if second.body.len() as u64 != n {
            return Err(bad(format!(
                "{} header bytes received of {n}",
                second.body.len()
            )));
        }
        let mut header = first.body;
        header.extend_from_slice(&second.body);
        self.headers.put(&self.commit, file, &etag, &header, size)?;
        Ok(Some(Shard {
            file: file.to_string(),
            header,
            size,
        }))
    }
}

/// What a repo without config.json holds, from its file names.
pub(crate) fn what_it_is(files: &[String]) -> String {
    let gguf: Vec<&String> = files.iter().filter(|f| f.ends_with(".gguf")).collect();
    if files.iter().any(|f| f == "model_index.json") {
        return "it is a diffusers pipeline (model_index.json), not a transformers model; vram reads a transformers config.json".into();
    }
    if !gguf.is_empty() {
        return format!(
            "it holds GGUF files only ({}{}); vram reads a transformers config.json: name the repo the GGUF was converted from",
            gguf[0],
            if gguf.len() > 1 {
                format!(" and {} more", gguf.len() - 1)
            } else {
                String::new()
            }
        );
    }
    if files.iter().any(|f| f == "params.json") {
        return "it holds Mistral's native params.json, not a transformers config.json; name the repo's transformers version".into();
    }
    if files.is_empty() {
        return "vram reads a transformers config.json".into();
    }
    let mut shown: Vec<&str> = files.iter().take(5).map(String::as_str).collect();
    if files.len() > 5 {
        shown.push("...");
    }
    format!(
        "its files are {}; vram reads a transformers config.json",
        shown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{check_revision, encode, is_repo_id, what_it_is};

    #[test]
    fn repo_ids() {
        for ok in [
            "Qwen/Qwen3-8B",
            "gpt2",
            "meta-llama/Llama-3.1-8B",
            "a_b/c.d",
        ] {
            assert!(is_repo_id(ok), "{ok}");
        }
        for bad in [
            "./Qwen",
            "/abs/path",
            "a/b/c",
            "a//b",
            "-a/b",
            "a/b.",
            "a--b/c",
            "a/..",
            "x.json/",
            "",
            "a b/c",
        ] {
            assert!(!is_repo_id(bad), "{bad}");
        }
        assert_eq!(encode("refs/pr/1"), "refs%2Fpr%2F1");
    }

    /// A revision is a path under the cache's `refs/`: `../../x` wrote the commit outside it.
    #[test]
    fn revisions_git_could_not_name_are_refused() {
        for ok in ["main", "v1.0", "refs/pr/1", "5ecfde1", "release-2024_01"] {
            assert!(check_revision(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("../../x", "starts with `.`"),
            ("/abs", "empty"),
            ("a//b", "empty"),
            ("a/", "empty"),
            ("a b", "space"),
            ("a\\b", "backslash"),
            ("a\nb", "control"),
            ("a..b", "`..`"),
            ("x.lock", "`.lock`"),
            ("x@{1}", "`@{`"),
        ] {
            let e = check_revision(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--revision `") && e.contains(why),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn repos_without_a_config_say_what_they_are() {
        let s = |v: &[&str]| what_it_is(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert!(s(&["model_index.json", "unet/config.json"]).contains("diffusers pipeline"));
        assert!(s(&["q4.gguf", "q8.gguf"]).contains("GGUF files only (q4.gguf and 1 more)"));
    }
}
