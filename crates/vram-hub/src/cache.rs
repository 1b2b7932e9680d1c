//! The caches: huggingface_hub's layout (`models--org--name/{blobs,refs,snapshots,.no_exist}`
//! with `.locks/`), ModelScope's folder per model, and vram's own cache of safetensors
//! headers (never written where a loader would take it for the file).
//!
//! Every write is a temporary file in the destination's folder renamed into place, so an
//! interrupt leaves the old state or the new one, never a partial file.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Cache {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` atomically (a `.incomplete` file beside it, renamed).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let stem = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!("{stem}."))
        .suffix(".incomplete")
        .tempfile_in(dir)
        .map_err(io_err(dir))?;
    tmp.write_all(bytes).map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| Error::Cache {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Reads at most `limit` bytes of a file; `None` when it is absent.
pub(crate) fn read_limited(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf).map_err(io_err(path))?;
    Ok(Some(buf))
}

/// The 8-byte length and the JSON header of a safetensors file on disk, and the file's size.
pub(crate) fn local_header(path: &Path) -> Result<Option<(Vec<u8>, u64)>> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let size = f.metadata().map_err(io_err(path))?.len();
    let mut first8 = [0u8; 8];
    if size < 8 {
        return Ok(None);
    }
    f.read_exact(&mut first8).map_err(io_err(path))?;
    let n = u64::from_le_bytes(first8);
    if n == 0 || n > crate::MAX_HEADER || 8 + n > size {
        // Not a whole safetensors file: let the caller fetch the header instead.
        return Ok(None);
    }
    let mut buf = first8.to_vec();
    (&mut f)
        .take(n)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    Ok(Some((buf, size)))
}

/// An exclusive lock held while it lives: huggingface_hub's `.locks/<repo folder>/<etag>.lock`
/// (flock, as Python's filelock takes it), so vram and a `from_pretrained` running beside it
/// never write the same blob at once.
pub(crate) struct Lock {
    _file: File,
}

impl Lock {
    pub(crate) fn take(path: &Path) -> Result<Lock> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io_err(path))?;
        fs4::FileExt::lock(&file).map_err(io_err(path))?;
        Ok(Lock { _file: file })
    }
}

/// huggingface_hub's `_normalize_etag`: `W/"x"` and `"x"` become `x`.
pub(crate) fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

/// Whether `s` is a full commit hash (40 lower-case hex digits).
pub(crate) fn is_commit(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// One repo in huggingface_hub's cache.
#[derive(Debug, Clone)]
pub(crate) struct HfCache {
    /// `<cache>/models--org--name`.
    pub dir: PathBuf,
    /// `<cache>/.locks/models--org--name`.
    locks: PathBuf,
}

impl HfCache {
    pub fn new(cache: &Path, folder: &str) -> HfCache {
        HfCache {
            dir: cache.join(folder),
            locks: cache.join(".locks").join(folder),
        }
    }

    /// The commit a branch or tag pointed to when it was last resolved.
    pub fn read_ref(&self, revision: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        let c = text.trim();
        is_commit(c).then(|| c.to_string())
    }

    /// Records that `revision` points to `commit` (only if it changed, as huggingface_hub).
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit || self.read_ref(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        write_atomic(&self.dir.join("refs").join(revision), commit.as_bytes())
    }

    /// `snapshots/<commit>/<file>`, what `from_pretrained` opens.
    pub fn pointer(&self, commit: &str, file: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit).join(file)
    }

    fn no_exist_path(&self, commit: &str, file: &str) -> PathBuf {
        self.dir.join(".no_exist").join(commit).join(file)
    }

    /// Whether the cache records that `file` is not in the repo at `commit`.
    pub fn no_exist(&self, commit: &str, file: &str) -> bool {
        self.no_exist_path(commit, file).is_file()
    }

    /// Records that `file` is not in the repo at `commit` (huggingface_hub's `.no_exist`).
    pub fn mark_no_exist(&self, commit: &str, file: &str) -> Result<()> {
        write_atomic(&self.no_exist_path(commit, file), b"")
    }

    /// Stores a whole file: the blob `blobs/<etag>` (under the repo's lock for that etag) and
    /// the snapshot's relative symlink to it, as huggingface_hub lays them out.
    pub fn store(&self, commit: &str, file: &str, etag: &str, bytes: &[u8]) -> Result<PathBuf> {
        let blob = self.dir.join("blobs").join(etag);
        {
            let _lock = Lock::take(&self.locks.join(format!("{etag}.lock")))?;
            if !blob.is_file() {
                write_atomic(&blob, bytes)?;
            }
        }
        let pointer = self.pointer(commit, file);
        link(&blob, &pointer, file)?;
        Ok(pointer)
    }
}

/// `pointer` → `blob`, relative (`../../blobs/<etag>`, one more `..` per folder in `file`),
/// made under a temporary name and renamed over; a copy where symlinks are not supported.
fn link(blob: &Path, pointer: &Path, file: &str) -> Result<()> {
    let dir = pointer.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    #[cfg(unix)]
    {
        let depth = file.matches('/').count() + 2;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(blob.file_name().unwrap_or_default());
        let tmp = dir.join(format!(
            ".{}.{}.incomplete",
            pointer.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, pointer).map_err(io_err(pointer))?;
        Ok(())
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        let bytes = std::fs::read(blob).map_err(io_err(blob))?;
        write_atomic(pointer, &bytes)
    }
}

/// vram's own cache of safetensors headers for one repo:
/// `blobs/<file etag>` holds the 8-byte length and the JSON header, and
/// `snapshots/<commit>/<file>.json` says which etag and whole-file size `file` has at that
/// commit. Nothing here is named `*.safetensors`, and nothing is under the hub's cache, so
/// no loader mistakes a header for the weights.
#[derive(Debug, Clone)]
pub(crate) struct HeaderCache {
    dir: PathBuf,
}

impl HeaderCache {
    pub fn new(dir: PathBuf) -> HeaderCache {
        HeaderCache { dir }
    }

    fn entry(&self, commit: &str, file: &str) -> PathBuf {
        self.dir
            .join("snapshots")
            .join(commit)
            .join(format!("{file}.json"))
    }

    /// The header and file size recorded for `file` at `commit`.
    pub fn get(&self, commit: &str, file: &str) -> Option<(Vec<u8>, u64)> {
        let text = std::fs::read_to_string(self.entry(commit, file)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let etag = v.get("etag")?.as_str()?;
        let size = v.get("size")?.as_u64()?;
        self.blob(etag).map(|h| (h, size))
    }

    /// The header stored under a file's etag, when it is whole.
    pub fn blob(&self, etag: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.dir.join("blobs").join(etag)).ok()?;
        let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        (bytes.len() as u64 == 8 + n).then_some(bytes)
    }

    /// Records `file`'s header at `commit`, keyed by its etag.
    pub fn put(
        &self,
        commit: &str,
        file: &str,
        etag: &str,
        header: &[u8],
        size: u64,
    ) -> Result<()> {
        let blob = self.dir.join("blobs").join(etag);
        if self.blob(etag).is_none() {
            write_atomic(&blob, header)?;
        }
        let entry = serde_json::json!({"etag": etag, "size": size}).to_string();
        write_atomic(&self.entry(commit, file), entry.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_and_commits() {
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit("main"));
        assert!(!is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    }

    #[test]
    fn store_lays_out_blobs_refs_and_relative_links() {
        let root = tempfile::tempdir().unwrap();
        let c = HfCache::new(root.path(), "models--org--m");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        c.write_ref("main", commit).unwrap();
        assert_eq!(c.read_ref("main").as_deref(), Some(commit));
        let p = c.store(commit, "config.json", "e1", b"{}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        #[cfg(unix)]
        assert_eq!(std::fs::read_link(&p).unwrap(), Path::new("../../blobs/e1"));
        assert!(root.path().join(".locks/models--org--m/e1.lock").is_file());
        c.mark_no_exist(commit, "model.safetensors.index.json")
            .unwrap();
        assert!(c.no_exist(commit, "model.safetensors.index.json"));
        // No temporary file is left behind.
        for dir in ["blobs", "refs", &format!("snapshots/{commit}")] {
            for e in std::fs::read_dir(c.dir.join(dir)).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                assert!(!name.contains("incomplete"), "{dir}/{name}");
            }
        }
    }
}
