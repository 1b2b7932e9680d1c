//! A loopback Hugging Face Hub (and ModelScope) for tests that never touch the network.
//!
//! Two listeners play the two hosts a download meets: the Hub (`127.0.0.1`) and its CDN
//! (`127.0.0.2`, another host name, so a client that forwards the token across the redirect
//! is caught). The Hub answers as huggingface.co does (read from huggingface_hub 2.4's
//! `file_download.py`, `utils/_http.py` and the Hub's responses): `/{repo}/resolve/{rev}/{file}`
//! with `HEAD`, `GET` and `Range`; `ETag`, `X-Repo-Commit`, `X-Linked-Etag`/`X-Linked-Size`,
//! `Content-Length`/`Content-Range`; LFS files (`*.safetensors`) as a 302 to the CDN; a 307
//! for a renamed repo; `/api/models/{repo}/revision/{rev}`; 401/403 with
//! `X-Error-Code: GatedRepo`; 404 with `RepoNotFound`, `RevisionNotFound`, `EntryNotFound`;
//! and, on request, a slow answer or a 5xx. ModelScope's paths
//! (`/api/v1/models/{id}/repo/files`, `/api/v1/models/{id}/repo?Revision=&FilePath=`) are
//! served from the same repos. Every request is logged ([`FakeHub::hits`]) with the body
//! bytes the server sent, so a test can assert that only headers crossed.
//!
//! Files are virtual: a head of real bytes followed by zeros up to the file's length, so a
//! checkpoint of any size costs only its header.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, Server, StatusCode};

/// One file of a fake repo: `head` followed by zeros up to `len` bytes.
#[derive(Debug, Clone)]
pub struct FakeFile {
    /// The bytes the file starts with.
    pub head: Arc<Vec<u8>>,
    /// The whole length.
    pub len: u64,
    /// Stored in LFS (answered by a redirect to the CDN), as `*.safetensors` are.
    pub lfs: bool,
    /// The git blob id (a non-LFS file's ETag) or the LFS sha256 (`X-Linked-Etag`).
    pub oid: String,
}

/// A deterministic hex id of `n` digits (a stand-in for git's sha1 and LFS's sha256).
pub fn hex_id(seed: &[u8], n: usize) -> String {
    // FNV-1a, extended by re-hashing: stable across runs and platforms.
    let mut out = String::new();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut round = 0u8;
    while out.len() < n {
        for &b in seed.iter().chain(std::iter::once(&round)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
        round = round.wrapping_add(1);
    }
    out.truncate(n);
    out
}

impl FakeFile {
    /// A small file held whole (config.json, an index).
    pub fn bytes(b: impl Into<Vec<u8>>) -> FakeFile {
        let b = b.into();
        FakeFile {
            oid: hex_id(&b, 40),
            len: b.len() as u64,
            head: Arc::new(b),
            lfs: false,
        }
    }

    /// An LFS file of `len` bytes that starts with `head` (zeros after it).
    pub fn lfs(head: Vec<u8>, len: u64) -> FakeFile {
        let mut seed = head.clone();
        seed.extend_from_slice(&len.to_le_bytes());
        FakeFile {
            oid: hex_id(&seed, 64),
            len: len.max(head.len() as u64),
            head: Arc::new(head),
            lfs: true,
        }
    }

    /// The whole file's bytes (for small files a test reads back).
    pub fn materialize(&self) -> Vec<u8> {
        let mut v = self.head.as_ref().clone();
        v.resize(self.len as usize, 0);
        v
    }
}

/// The bytes of one dtype's element, as safetensors names dtypes.
fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        _ => 1,
    }
}

/// A safetensors file whose tensors are `(name, dtype, shape)` (data all zeros): the header
/// exactly as the format lays it out (8-byte length, JSON padded with spaces to 8 bytes,
/// offsets in order) and the file's length, as an LFS file.
pub fn safetensors(tensors: &[(String, &str, Vec<u64>)]) -> FakeFile {
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * dtype_size(dtype);
        map.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(map)).unwrap_or_default();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut head = (json.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(&json);
    let len = head.len() as u64 + offset;
    FakeFile::lfs(head, len)
}

/// One repo: its files at each commit, and its branches and tags.
#[derive(Debug, Clone, Default)]
struct FakeRepo {
    /// Branch or tag → commit.
    refs: BTreeMap<String, String>,
    /// Commit → files.
    trees: BTreeMap<String, BTreeMap<String, FakeFile>>,
    /// Gated: the tokens granted access.
    granted: Option<Vec<String>>,
}

/// A request the fake hub answered.
#[derive(Debug, Clone)]
pub struct Hit {
    /// `hub` or `cdn`.
    pub host: &'static str,
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The URL's path (no query).
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The status answered.
    pub status: u16,
    /// Body bytes sent (the answer's `Content-Length`; none for `HEAD`).
    pub body_bytes: u64,
}

#[derive(Debug, Default)]
struct State {
    repos: BTreeMap<String, FakeRepo>,
    renamed: BTreeMap<String, String>,
    tokens: Vec<String>,
    hits: Vec<Hit>,
    /// Statuses to answer to the next hub requests, in order.
    fail: Vec<u16>,
    /// Pause before answering the next hub requests.
    delay: Vec<Duration>,
    cdn: String,
}

/// The running fake hub. Dropping it stops both listeners.
pub struct FakeHub {
    state: Arc<Mutex<State>>,
    servers: Vec<Arc<Server>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// `http://127.0.0.1:PORT`: what `HF_ENDPOINT` (and `MODELSCOPE_DOMAIN`) point at.
    pub endpoint: String,
    /// The CDN's origin (`http://127.0.0.2:PORT`).
    pub cdn: String,
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

/// A reader of `file`'s bytes `start..end`.
struct Slice {
    head: Arc<Vec<u8>>,
    pos: u64,
    end: u64,
}

impl Read for Slice {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = ((self.end - self.pos) as usize).min(buf.len());
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = self.head.get(self.pos as usize + i).copied().unwrap_or(0);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// A `Range: bytes=a-b` (or `a-`) against a file of `len` bytes: `Some(Ok((a, b)))`
/// inclusive, `Some(Err(()))` when it cannot be satisfied, `None` with no range.
fn parse_range(range: Option<&str>, len: u64) -> Option<Result<(u64, u64), ()>> {
    let r = range?.trim().strip_prefix("bytes=")?;
    let (a, b) = r.split_once('-')?;
    let a: u64 = a.trim().parse().ok()?;
    let b: u64 = if b.trim().is_empty() {
        len.saturating_sub(1)
    } else {
        b.trim().parse().ok()?
    };
    Some(if a >= len || b < a {
        Err(())
    } else {
        Ok((a, b.min(len - 1)))
    })
}

fn query(url: &str) -> BTreeMap<String, String> {
    let q = url.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An answer before it is sent.
struct Answer {
    status: u16,
    headers: Vec<Header>,
    body: Option<Slice>,
}

impl Answer {
    fn empty(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: None,
        }
    }

    fn error(status: u16, code: &str, message: &str) -> Answer {
        let mut a = Answer::json(status, &serde_json::json!({"error": message}));
        if !code.is_empty() {
            a.headers.push(header("X-Error-Code", code));
        }
        a.headers.push(header("X-Error-Message", message));
        a
    }

    fn json(status: u16, v: &serde_json::Value) -> Answer {
        let b = v.to_string().into_bytes();
        let len = b.len() as u64;
        Answer {
            status,
            headers: vec![header("Content-Type", "application/json")],
            body: Some(Slice {
                head: Arc::new(b),
                pos: 0,
                end: len,
            }),
        }
    }

    fn with(mut self, name: &str, value: &str) -> Answer {
        self.headers.push(header(name, value));
        self
    }
}

/// The file answer (200, or 206/416 under `Range`) with its length headers.
fn serve_file(f: &FakeFile, range: Option<&str>) -> Answer {
    match parse_range(range, f.len) {
        Some(Err(())) => Answer::empty(416).with("Content-Range", &format!("bytes */{}", f.len)),
        Some(Ok((a, b))) => Answer {
            status: 206,
            headers: vec![
                header("Content-Range", &format!("bytes {a}-{b}/{}", f.len)),
                header("Accept-Ranges", "bytes"),
            ],
            body: Some(Slice {
                head: f.head.clone(),
                pos: a,
                end: b + 1,
            }),
        },
        None => Answer {
            status: 200,
            headers: vec![header("Accept-Ranges", "bytes")],
            body: Some(Slice {
                head: f.head.clone(),
                pos: 0,
                end: f.len,
            }),
        },
    }
}

impl FakeHub {
    /// Starts both listeners on loopback ports chosen by the system.
    pub fn start() -> FakeHub {
        let hub = Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1"));
        // Another host name for the CDN: 127.0.0.2 where the system routes all of 127/8
        // to loopback (Linux), else `localhost` against 127.0.0.1.
        let (cdn, cdn_host) = match Server::http("127.0.0.2:0") {
            Ok(s) => (Arc::new(s), "127.0.0.2"),
            Err(_) => (
                Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1")),
                "localhost",
            ),
        };
        let port = |s: &Server| s.server_addr().to_ip().map_or(0, |a| a.port());
        let endpoint = format!("http://127.0.0.1:{}", port(&hub));
        let cdn_origin = format!("http://{cdn_host}:{}", port(&cdn));
        let state = Arc::new(Mutex::new(State {
            cdn: cdn_origin.clone(),
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (server, is_cdn) in [(hub.clone(), false), (cdn.clone(), true)] {
            let state = state.clone();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let state = state.clone();
                    std::thread::spawn(move || handle(&state, req, is_cdn));
                }
            }));
        }
        FakeHub {
            state,
            servers: vec![hub, cdn],
            threads,
            stop,
            endpoint,
            cdn: cdn_origin,
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Adds (or replaces) `repo` with `files` at a new commit that `main` and `master` point
    /// to; returns the commit.
    pub fn add_repo(&self, repo: &str, files: Vec<(&str, FakeFile)>) -> String {
        self.add_revision(repo, &["main", "master"], files)
    }

    /// Adds a commit of `repo` holding `files`, pointed to by each of `refs` (branches or
    /// tags); returns the commit.
    pub fn add_revision(&self, repo: &str, refs: &[&str], files: Vec<(&str, FakeFile)>) -> String {
        let mut seed = repo.as_bytes().to_vec();
        for (name, f) in &files {
            seed.extend_from_slice(name.as_bytes());
            seed.extend_from_slice(f.oid.as_bytes());
        }
        let commit = hex_id(&seed, 40);
        self.with_state(|s| {
            let r = s.repos.entry(repo.to_string()).or_default();
            r.trees.insert(
                commit.clone(),
                files.into_iter().map(|(n, f)| (n.to_string(), f)).collect(),
            );
            for name in refs {
                r.refs.insert(name.to_string(), commit.clone());
            }
        });
        commit
    }

    /// The files of `repo` at `rev`, as the fake serves them.
    pub fn file(&self, repo: &str, rev: &str, file: &str) -> Option<FakeFile> {
        self.with_state(|s| {
            let r = s.repos.get(repo)?;
            let commit = r.refs.get(rev).cloned().unwrap_or_else(|| rev.to_string());
            r.trees.get(&commit)?.get(file).cloned()
        })
    }

    /// Makes `repo` gated: only `granted` tokens may read it.
    pub fn gate(&self, repo: &str, granted: &[&str]) {
        self.with_state(|s| {
            if let Some(r) = s.repos.get_mut(repo) {
                r.granted = Some(granted.iter().map(|t| t.to_string()).collect());
            }
        });
    }

    /// Tokens the hub accepts as valid (any other is refused with 401).
    pub fn accept_tokens(&self, tokens: &[&str]) {
        self.with_state(|s| s.tokens = tokens.iter().map(|t| t.to_string()).collect());
    }

    /// `old` now answers with a 307 to `new`.
    pub fn rename(&self, old: &str, new: &str) {
        self.with_state(|s| {
            s.renamed.insert(old.to_string(), new.to_string());
        });
    }

    /// The next hub requests are answered with these statuses (then normally).
    pub fn fail_next(&self, statuses: &[u16]) {
        self.with_state(|s| s.fail = statuses.iter().rev().copied().collect());
    }

    /// The next `n` hub requests wait `d` before they are answered.
    pub fn delay_next(&self, n: usize, d: Duration) {
        self.with_state(|s| s.delay = vec![d; n]);
    }

    /// Every request answered so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.with_state(|s| s.hits.clone())
    }

    /// Forgets the requests answered so far.
    pub fn clear_hits(&self) {
        self.with_state(|s| s.hits.clear());
    }
}

impl std::fmt::Debug for FakeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHub")
            .field("endpoint", &self.endpoint)
            .field("cdn", &self.cdn)
            .finish()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for s in &self.servers {
            s.unblock();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn handle(state: &Arc<Mutex<State>>, req: Request, is_cdn: bool) {
    let get = |name: &'static str| {
        req.headers()
            .iter()
            .find(|h| h.field.equiv(name))
            .map(|h| h.value.as_str().to_string())
    };
    let range = get("Range");
    let authorization = get("Authorization");
    let url = req.url().to_string();
    let path = decode(url.split('?').next().unwrap_or(""));
    let method = req.method().clone();
    let (delay, fail) = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if is_cdn {
            (None, None)
        } else {
            (s.delay.pop(), s.fail.pop())
        }
    };
    if let Some(d) = delay {
        std::thread::sleep(d);
    }
    let answer = match fail {
        Some(status) => Answer::error(status, "", "the fake hub was told to fail"),
        None => {
            let s = state.lock().unwrap_or_else(|e| e.into_inner());
            if is_cdn {
                cdn(&s, &path, range.as_deref())
            } else {
                hub(&s, &url, &path, range.as_deref(), authorization.as_deref())
            }
        }
    };
    let head = method == Method::Head;
    let body_len = answer.body.as_ref().map_or(0, |b| b.end - b.pos);
    state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .hits
        .push(Hit {
            host: if is_cdn { "cdn" } else { "hub" },
            method: method.as_str().to_string(),
            path,
            range,
            authorization,
            status: answer.status,
            body_bytes: if head { 0 } else { body_len },
        });
    let body: Box<dyn Read + Send> = match answer.body {
        Some(b) => Box::new(b),
        None => Box::new(std::io::empty()),
    };
    let resp = Response::new(
        StatusCode(answer.status),
        answer.headers,
        body,
        Some(body_len as usize),
        None,
    );
    let _ = req.respond(resp);
}

fn cdn(s: &State, path: &str, range: Option<&str>) -> Answer {
    let Some(oid) = path.strip_prefix("/cdn/") else {
        return Answer::empty(404);
    };
    let file = s
        .repos
        .values()
        .flat_map(|r| r.trees.values())
        .flat_map(|t| t.values())
        .find(|f| f.oid == oid);
    match file {
        Some(f) => serve_file(f, range).with("ETag", &format!("\"{}\"", f.oid)),
        None => Answer::empty(404),
    }
}

fn hub(s: &State, url: &str, path: &str, range: Option<&str>, auth: Option<&str>) -> Answer {
    let token = auth
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::to_string);
    if let Some(t) = &token {
        if !s.tokens.contains(t) {
            return Answer::error(401, "", "Invalid credentials in Authorization header");
        }
    }
    // ModelScope's paths.
    if let Some(rest) = path.strip_prefix("/api/v1/models/") {
        return modelscope(s, url, rest, range);
    }
    // huggingface_hub's `/api/models/{repo}/revision/{rev}`.
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some((repo, rev)) = rest.split_once("/revision/") else {
            return Answer::error(404, "", "not found");
        };
        return match lookup(s, repo, rev, token.as_deref()) {
            Err(a) => a,
            Ok((commit, tree)) => Answer::json(
                200,
                &serde_json::json!({
                    "id": repo, "sha": commit,
                    "siblings": tree.keys().map(|f| serde_json::json!({"rfilename": f})).collect::<Vec<_>>(),
                }),
            ),
        };
    }
    let Some((repo, rest)) = path.trim_start_matches('/').split_once("/resolve/") else {
        return Answer::error(404, "", "not found");
    };
    let Some((rev, file)) = rest.split_once('/') else {
        return Answer::error(404, "", "not found");
    };
    if let Some(new) = s.renamed.get(repo) {
        return Answer::empty(307).with("Location", &format!("/{new}/resolve/{rev}/{file}"));
    }
    let (commit, tree) = match lookup(s, repo, rev, token.as_deref()) {
        Err(a) => return a,
        Ok(x) => x,
    };
    let Some(f) = tree.get(file) else {
        return Answer::error(
            404,
            "EntryNotFound",
            &format!("{file} does not exist at {rev}"),
        )
        .with("X-Repo-Commit", &commit);
    };
    if f.lfs {
        return Answer::empty(302)
            .with(
                "Location",
                &format!("{}/cdn/{}?X-Amz-Signature=fake", s.cdn, f.oid),
            )
            .with("X-Repo-Commit", &commit)
            .with("X-Linked-Etag", &format!("\"{}\"", f.oid))
            .with("X-Linked-Size", &f.len.to_string())
            .with("ETag", &format!("\"{}\"", hex_id(f.oid.as_bytes(), 40)));
    }
    serve_file(f, range)
        .with("X-Repo-Commit", &commit)
        .with("ETag", &format!("\"{}\"", f.oid))
}

/// The repo's commit and files at `rev`, or the Hub's error answer.
fn lookup<'a>(
    s: &'a State,
    repo: &str,
    rev: &str,
    token: Option<&str>,
) -> Result<(String, &'a BTreeMap<String, FakeFile>), Answer> {
    let Some(r) = s.repos.get(repo) else {
        // The Hub answers 401 to an anonymous request for a repo it cannot show.
        return Err(Answer::error(
            if token.is_some() { 404 } else { 401 },
            "RepoNotFound",
            "Repository not found",
        ));
    };
    if let Some(granted) = &r.granted {
        match token {
            None => {
                return Err(Answer::error(
                    401,
                    "GatedRepo",
                    "Access to this model is restricted. You must be authenticated.",
                ))
            }
            Some(t) if !granted.iter().any(|g| g == t) => {
                return Err(Answer::error(
                    403,
                    "GatedRepo",
                    "Access to this model is restricted and you are not in the authorized list.",
                ))
            }
            Some(_) => {}
        }
    }
    let commit = r.refs.get(rev).cloned().unwrap_or_else(|| rev.to_string());
    match r.trees.get(&commit) {
        Some(t) => Ok((commit, t)),
        None => Err(Answer::error(
            404,
            "RevisionNotFound",
            &format!("Invalid rev id: {rev}"),
        )),
    }
}

fn modelscope(s: &State, url: &str, rest: &str, range: Option<&str>) -> Answer {
    let q = query(url);
    let rev = q.get("Revision").map_or("master", String::as_str);
    let (repo, files) = if let Some(repo) = rest.strip_suffix("/repo/files") {
        (repo, true)
    } else if let Some(repo) = rest.strip_suffix("/repo") {
        (repo, false)
    } else {
        return Answer::empty(404);
    };
    let Some(r) = s.repos.get(repo) else {
        return Answer::json(
            404,
            &serde_json::json!({"Code": 10010205001u64, "Message": "Model not found", "Success": false}),
        );
    };
    let commit = r.refs.get(rev).cloned().unwrap_or_else(|| rev.to_string());
    let Some(tree) = r.trees.get(&commit) else {
        return Answer::json(
            404,
            &serde_json::json!({"Code": 10010205001u64, "Message": format!("Revision {rev} not found"), "Success": false}),
        );
    };
    if files {
        let list: Vec<_> = tree
            .iter()
            .map(|(p, f)| {
                serde_json::json!({"Name": p, "Path": p, "Type": "blob", "Size": f.len,
                    "Sha256": if f.lfs { f.oid.clone() } else { hex_id(f.oid.as_bytes(), 64) },
                    "Revision": commit})
            })
            .collect();
        return Answer::json(
            200,
            &serde_json::json!({"Code": 200, "Data": {"Files": list}, "Message": "success", "Success": true}),
        );
    }
    match q.get("FilePath").and_then(|p| tree.get(p)) {
        Some(f) => serve_file(f, range),
        None => Answer::json(
            404,
            &serde_json::json!({"Code": 10010205001u64, "Message": "file not found", "Success": false}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, parse_range, safetensors};

    #[test]
    fn ranges_and_decoding() {
        assert_eq!(parse_range(Some("bytes=0-7"), 100), Some(Ok((0, 7))));
        assert_eq!(parse_range(Some("bytes=90-"), 100), Some(Ok((90, 99))));
        assert_eq!(parse_range(Some("bytes=100-120"), 100), Some(Err(())));
        assert_eq!(parse_range(None, 100), None);
        assert_eq!(decode("refs%2Fpr%2F1"), "refs/pr/1");
    }

    #[test]
    fn safetensors_layout() {
        let f = safetensors(&[
            ("a".into(), "BF16", vec![2, 3]),
            ("b".into(), "F32", vec![4]),
        ]);
        let n = u64::from_le_bytes(f.head[..8].try_into().unwrap());
        assert_eq!(f.head.len() as u64, 8 + n);
        assert_eq!(n % 8, 0);
        assert_eq!(f.len, 8 + n + 12 + 16);
    }
}
