//! Reading user input: model arguments (catalog id, config.json, safetensors) and byte sizes.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use vram_model::arch::Model;
use vram_model::safetensors_header::{self, Tally};
use vram_model::{catalog, hf};

use crate::bad_input;

/// A model argument resolved, with where it came from.
#[derive(Debug)]
pub struct Resolved {
    /// The model.
    pub model: Model,
    /// Parameters counted from checkpoint headers beside the config, if any.
    pub checkpoint: Option<vram_model::arch::Weights>,
    /// The config.json text the model was read from (the catalog's embedded one for an id).
    pub config: Option<String>,
}

/// Largest config.json read (a real one is a few KiB).
const MAX_CONFIG: u64 = 16 << 20;

fn read_text(path: &Path, what: &str) -> Result<String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| bad_input!("cannot read {what} {}: {e}", path.display()))?;
    if meta.len() > MAX_CONFIG {
        return Err(bad_input!(
            "{what} {} is {} bytes; a config is a few KiB",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| bad_input!("cannot read {what} {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| {
        bad_input!(
            "{what} {} is not UTF-8 text (a binary file?)",
            path.display()
        )
    })
}

/// Resolves a model argument: an existing path first, then a catalog id.
pub fn resolve_model(arg: &str) -> Result<Resolved> {
    let path = Path::new(arg);
    if path.is_dir() {
        let config = path.join("config.json");
        if !config.is_file() {
            return Err(bad_input!("folder {} has no config.json", path.display()));
        }
        let text = read_text(&config, "config")?;
        let name = name_or_path(&text).unwrap_or_else(|| folder_name(path));
        let model =
            hf::parse_config(&text, &name).with_context(|| format!("{}", config.display()))?;
        let checkpoint = checkpoint_beside(path)?;
        return Ok(Resolved {
            model,
            checkpoint,
            config: Some(text),
        });
    }
    if path.is_file() {
        if arg.ends_with(".safetensors") {
            let mut tally = Tally::default();
            read_header(path, &mut tally)?;
            return Ok(Resolved {
                model: Model::Weights(tally.into_weights(&file_name(path))),
                checkpoint: None,
                config: None,
            });
        }
        let text = read_text(path, "file")?;
        if arg.ends_with(".index.json") || text.contains("\"weight_map\"") {
            let weights = read_index(path, &text)?;
            return Ok(Resolved {
                model: Model::Weights(weights),
                checkpoint: None,
                config: None,
            });
        }
        // A config file is named by `_name_or_path` inside it, else by its own stem
        // (`configs/gpt2.json` is "gpt2"), never by the folder that holds it.
        let name = name_or_path(&text).unwrap_or_else(|| file_stem(path));
        let model =
            hf::parse_config(&text, &name).with_context(|| format!("{}", path.display()))?;
        return Ok(Resolved {
            model,
            checkpoint: None,
            config: Some(text),
        });
    }
    match catalog::lookup(arg) {
        Ok(model) => Ok(Resolved {
            model,
            checkpoint: None,
            config: catalog::config_text(arg).map(str::to_string),
        }),
        Err(e) if looks_like_path(arg) => {
            drop(e);
            Err(bad_input!("no such file or folder: {arg}"))
        }
        Err(e) => Err(e.into()),
    }
}

fn looks_like_path(arg: &str) -> bool {
    arg.contains('/')
        || arg.contains('\\')
        || arg.ends_with(".json")
        || arg.ends_with(".safetensors")
}

fn folder_name(p: &Path) -> String {
    let abs = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    abs.file_name()
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
}

fn file_stem(p: &Path) -> String {
    p.file_stem()
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
}

/// The last path component of a config's `_name_or_path` (`meta-llama/Llama-3.1-8B` gives
/// `Llama-3.1-8B`), when it is a non-empty string.
fn name_or_path(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let s = v
        .get("_name_or_path")?
        .as_str()?
        .trim()
        .trim_end_matches(['/', '\\']);
    let last = s.rsplit(['/', '\\']).next()?.trim();
    (!last.is_empty()).then(|| last.to_string())
}

/// Adds one safetensors file's tensors to `tally`, reading only its header.
fn read_header(path: &Path, tally: &mut Tally) -> Result<()> {
    let mut f = File::open(path).map_err(|e| bad_input!("cannot read {}: {e}", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut first8 = Vec::with_capacity(8);
    (&mut f)
        .take(8)
        .read_to_end(&mut first8)
        .map_err(|e| bad_input!("cannot read {}: {e}", path.display()))?;
    let n = safetensors_header::header_len(&first8).with_context(|| path.display().to_string())?;
    if 8 + n > len {
        return Err(bad_input!(
            "{}: header of {n} bytes runs past the end of the {len}-byte file (truncated?)",
            path.display()
        ));
    }
    let mut buf = first8;
    (&mut f)
        .take(n)
        .read_to_end(&mut buf)
        .map_err(|e| bad_input!("cannot read {}: {e}", path.display()))?;
    tally
        .add_header(&buf, len)
        .with_context(|| path.display().to_string())?;
    Ok(())
}

fn read_index(index: &Path, text: &str) -> Result<vram_model::arch::Weights> {
    let shards =
        safetensors_header::index_shards(text).with_context(|| index.display().to_string())?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut tally = Tally::default();
    for shard in shards {
        let p: PathBuf = dir.join(&shard);
        if !p.is_file() {
            return Err(bad_input!("{}: shard {shard} is missing", index.display()));
        }
        read_header(&p, &mut tally)?;
    }
    Ok(tally.into_weights(&folder_name(dir)))
}

/// Parameters of a checkpoint beside a config.json, if the folder holds one.
fn checkpoint_beside(dir: &Path) -> Result<Option<vram_model::arch::Weights>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = read_text(&index, "index")?;
        return read_index(&index, &text).map(Some);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        let mut tally = Tally::default();
        read_header(&single, &mut tally)?;
        return Ok(Some(tally.into_weights(&folder_name(dir))));
    }
    Ok(None)
}

/// Parses a byte size: `1234`, `500MiB`, `8GiB`, `1.5GB`, `80G` (binary units for `K/M/G/T`).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (try 500MiB or 8GiB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = v * mult;
    if !bytes.is_finite() || bytes >= 2f64.powi(62) {
        return Err(format!("`{s}` is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::{file_stem, name_or_path, parse_bytes};
    use std::path::Path;

    #[test]
    fn config_files_are_named_by_themselves() {
        assert_eq!(file_stem(Path::new("configs/gpt2.json")), "gpt2");
        assert_eq!(
            name_or_path(r#"{"_name_or_path": "meta-llama/Llama-3.1-8B", "model_type": "llama"}"#),
            Some("Llama-3.1-8B".into())
        );
        assert_eq!(name_or_path(r#"{"_name_or_path": ""}"#), None);
        assert_eq!(name_or_path(r#"{"model_type": "gpt2"}"#), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("500MiB"), Ok(500 << 20));
        assert_eq!(parse_bytes("8GiB"), Ok(8 << 30));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("1234"), Ok(1234));
        assert!(parse_bytes("12XB").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("").is_err());
    }
}
