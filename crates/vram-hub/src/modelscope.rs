//! ModelScope, the second hub: its file endpoint
//! (`/api/v1/models/{id}/repo?Revision=..&FilePath=..`, which takes `Range`), its file list
//! (`/api/v1/models/{id}/repo/files`, with each file's size and sha256) and its cache
//! (`$MODELSCOPE_CACHE/models/{owner}/{name}`, one folder per model, as its SDK keeps it).
//! Read from ModelScope's own SDK (modelscope/hub/file_download.py, `get_file_download_url`).

use ureq::http::Method;

use crate::cache;
use crate::error::{Error, Result};
use crate::repo::{encode, what_it_is, Link, Repo, MAX_TEXT};

/// A file of the repo's listing.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// Lists the repo's files at the revision (the one request), or, offline, trusts the cache.
pub(crate) fn resolve(repo: &mut Repo) -> Result<()> {
    if let Link::Offline = repo.link {
        return Ok(());
    }
    let url = format!(
        "{}/api/v1/models/{}/repo/files?Revision={}&Recursive=true",
        repo.cfg.endpoint,
        repo.id,
        encode(&repo.revision)
    );
    let a = match repo
        .http
        .fetch(Method::GET, &url, None, MAX_TEXT, false, true)
    {
        Ok(a) => a,
        Err(f) => {
            if repo.cfg.repo_cache(&repo.id).join("config.json").is_file() {
                repo.note(format!(
                    "cannot reach {} ({}); using the cached {}",
                    repo.cfg.endpoint, f.reason, repo.id
                ));
                repo.link = Link::Down(f.reason);
                return Ok(());
            }
            return Err(repo.net_error(f));
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
    let code = v.get("Code").and_then(|c| c.as_i64()).unwrap_or(200);
    let message = v
        .get("Message")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    if a.status == 404 || (a.status == 200 && code != 200) {
        return Err(if message.to_ascii_lowercase().contains("revision") {
            Error::RevisionNotFound {
                repo: repo.id.clone(),
                revision: repo.revision.clone(),
                endpoint: repo.cfg.endpoint.clone(),
            }
        } else {
            Error::RepoNotFound {
                repo: repo.id.clone(),
                endpoint: repo.cfg.endpoint.clone(),
                has_token: false,
            }
        });
    }
    if a.status != 200 {
        return Err(repo.status_error(&a, "repo/files"));
    }
    let files = v
        .pointer("/Data/Files")
        .and_then(|f| f.as_array())
        .ok_or_else(|| Error::Protocol {
            repo: repo.id.clone(),
            endpoint: repo.cfg.endpoint.clone(),
            url_path: format!("/api/v1/models/{}/repo/files", repo.id),
            what: "no Data.Files list".into(),
        })?;
    repo.listing = Some(
        files
            .iter()
            .filter(|f| f.get("Type").and_then(|t| t.as_str()) != Some("tree"))
            .filter_map(|f| {
                Some(Listed {
                    path: f.get("Path")?.as_str()?.to_string(),
                    size: f.get("Size")?.as_u64()?,
                    sha256: f
                        .get("Sha256")
                        .and_then(|s| s.as_str())
                        .unwrap_or("")
                        .to_string(),
                })
            })
            .collect(),
    );
    Ok(())
}

pub(crate) fn listed(repo: &Repo, file: &str) -> Option<Listed> {
    repo.listing
        .as_ref()?
        .iter()
        .find(|l| l.path == file)
        .cloned()
}

/// Whether a file in ModelScope's cache folder is the repo's current one (its size as
/// listed; offline, whatever is there).
pub(crate) fn local_ok(repo: &Repo, file: &str, size: u64) -> bool {
    match &repo.listing {
        None => true,
        Some(_) => listed(repo, file).is_some_and(|l| l.size == size),
    }
}

pub(crate) fn file_url(repo: &Repo, file: &str) -> String {
    format!(
        "{}/api/v1/models/{}/repo?Revision={}&FilePath={}",
        repo.cfg.endpoint,
        repo.id,
        encode(&repo.revision),
        encode(file)
    )
}

/// A small file: from ModelScope's cache folder when it is the current one, else fetched
/// into it.
pub(crate) fn file(repo: &mut Repo, file: &str) -> Result<Option<Vec<u8>>> {
    let listed = listed(repo, file);
    if repo.listing.is_some() && listed.is_none() {
        return Ok(None);
    }
    let local = repo.cfg.repo_cache(&repo.id).join(file);
    if let Some(b) = cache::read_limited(&local, MAX_TEXT + 1)? {
        if listed.as_ref().is_none_or(|l| l.size == b.len() as u64) {
            return Ok(Some(b));
        }
    }
    if !matches!(repo.link, Link::Up) {
        return Err(repo.not_cached(file));
    }
    let url = file_url(repo, file);
    let a = repo
        .http
        .fetch(Method::GET, &url, None, MAX_TEXT + 1, true, false)
        .map_err(|f| repo.net_error(f))?;
    if a.status == 404 {
        return Ok(None);
    }
    if a.status != 200 {
        return Err(repo.status_error(&a, file));
    }
    if a.body.len() as u64 > MAX_TEXT {
        return Err(Error::Protocol {
            repo: repo.id.clone(),
            endpoint: repo.cfg.endpoint.clone(),
            url_path: file.to_string(),
            what: format!("larger than {} MiB; a config is a few KiB", MAX_TEXT >> 20),
        });
    }
    cache::write_atomic(&local, &a.body)?;
    Ok(Some(a.body))
}

pub(crate) fn no_config(repo: &Repo) -> Error {
    let files: Vec<String> = repo
        .listing
        .iter()
        .flatten()
        .map(|l| l.path.clone())
        .collect();
    Error::NoConfig {
        repo: repo.id.clone(),
        revision: repo.revision.clone(),
        what: what_it_is(&files),
    }
}
