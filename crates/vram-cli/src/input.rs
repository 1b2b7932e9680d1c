//! Reading user input: model arguments (a local path, a catalog id or a Hub id) and byte
//! sizes.
//!
//! A model argument is resolved in a documented order: an existing path first (a folder
//! with config.json, a config file, a .safetensors file or index), then a catalog id, then a
//! Hub id (`org/name`, read by vram-hub from the cache or the Hub). `--hub` reads the id
//! from that hub whatever exists locally; a `modelscope:` prefix means `--hub modelscope`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use vram_model::arch::Model;
use vram_model::safetensors_header::{self, Tally};
use vram_model::{catalog, hf};

use crate::bad_input;

/// Where a model argument is looked up beyond local paths and the catalog.
#[derive(Debug, Clone, Default, Args)]
pub struct HubArgs {
    /// A branch, tag or commit of a Hub model (default: main; ModelScope: master).
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// Read the model id from this hub, even where a local folder has its name
    /// (huggingface: HF_ENDPOINT for a mirror; modelscope: MODELSCOPE_DOMAIN). Without it, a
    /// local path wins, then a catalog id, then the Hugging Face Hub.
    #[arg(long, value_enum, value_name = "HUB")]
    pub hub: Option<HubArg>,
}

/// The hubs `--hub` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HubArg {
    /// The Hugging Face Hub (or the mirror HF_ENDPOINT names).
    Huggingface,
    /// ModelScope.
    Modelscope,
}

/// Where a resolved model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A built-in catalog id.
    Catalog,
    /// A local file or folder.
    Local,
    /// A hub repo: `id@commit`.
    Hub(String),
}

/// A model argument resolved, with where it came from.
#[derive(Debug)]
pub struct Resolved {
    /// The model.
    pub model: Model,
    /// The checkpoint beside the config (or on the Hub), if any, as its headers describe it:
    /// every tensor's exact dtype and shape, and the totals per dtype.
    pub checkpoint: Option<Tally>,
    /// The config.json text the model was read from (the catalog's embedded one for an id).
    pub config: Option<String>,
    /// Where it came from.
    pub origin: Origin,
}

impl Resolved {
    /// Parameters counted from the checkpoint's headers.
    pub fn checkpoint_params(&self) -> Option<u64> {
        self.checkpoint.as_ref().map(Tally::params)
    }

    /// How the checkpoint cross-check line names the checkpoint.
    pub fn checkpoint_place(&self) -> String {
        match &self.origin {
            Origin::Hub(label) => format!("checkpoint on the Hub ({label})"),
            _ => "checkpoint beside the config".into(),
        }
    }
}

/// Largest config.json read (a real one is a few KiB).
const MAX_CONFIG: u64 = 16 << 20;

/// The bytes of the file at `path`, refused beyond `max` bytes. The size is checked while
/// reading, not only from the file's metadata: a device or a pipe (`/dev/zero`, `<(...)`)
/// reports a length of 0 and would otherwise be read until memory runs out.
pub fn read_bounded(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let too_big = || {
        bad_input!(
            "{what} {} is larger than {}",
            path.display(),
            vram_model::fmt::bytes(max)
        )
    };
    let f =
        File::open(path).map_err(|e| bad_input!("cannot read {what} {}: {e}", path.display()))?;
    if f.metadata().is_ok_and(|m| m.len() > max) {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad_input!("cannot read {what} {}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    Ok(bytes)
}

/// Text as editors and shells save it: UTF-8, with or without a byte-order mark, or UTF-16
/// with its byte-order mark (what Windows PowerShell 5's `>` and `Out-File` write: a log or a
/// `vram ... --json` redirected there is UTF-16LE). `lossy`: bytes that are not valid in the
/// encoding become U+FFFD instead of refusing the text (`None`).
pub fn decode_text(bytes: &[u8], lossy: bool) -> Option<String> {
    let utf16 = |rest: &[u8], unit: fn([u8; 2]) -> u16| {
        let (pairs, odd) = rest.split_at(rest.len() / 2 * 2);
        let units = pairs.chunks_exact(2).map(|p| unit([p[0], p[1]]));
        let mut s = String::with_capacity(pairs.len() / 2);
        for c in char::decode_utf16(units) {
            match c {
                Ok(c) => s.push(c),
                Err(_) if lossy => s.push(char::REPLACEMENT_CHARACTER),
                Err(_) => return None,
            }
        }
        match (odd.is_empty(), lossy) {
            (true, _) => Some(s),
            (false, true) => Some(s + "\u{fffd}"),
            (false, false) => None,
        }
    };
    if let Some(rest) = bytes.strip_prefix(&[0xff, 0xfe]) {
        return utf16(rest, u16::from_le_bytes);
    }
    if let Some(rest) = bytes.strip_prefix(&[0xfe, 0xff]) {
        return utf16(rest, u16::from_be_bytes);
    }
    let rest = bytes.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(bytes);
    match std::str::from_utf8(rest) {
        Ok(s) => Some(s.to_string()),
        Err(_) if lossy => Some(String::from_utf8_lossy(rest).into_owned()),
        Err(_) => None,
    }
}

fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = read_bounded(path, what, MAX_CONFIG)?;
    String::from_utf8(bytes).map_err(|_| {
        bad_input!(
            "{what} {} is not UTF-8 text (a binary file?)",
            path.display()
        )
    })
}

/// Resolves a model argument: an existing path first, then a catalog id, then a Hub id
/// (`--hub` or a `modelscope:` prefix go to that hub directly).
pub fn resolve_model(arg: &str, hub: &HubArgs) -> Result<Resolved> {
    if let Some(id) = arg.strip_prefix("modelscope:") {
        if hub.hub == Some(HubArg::Huggingface) {
            return Err(bad_input!(
                "`{arg}` names ModelScope but --hub says huggingface"
            ));
        }
        return from_hub(
            vram_hub::Hub::ModelScope,
            id,
            hub.revision.as_deref(),
            false,
        )
        .map(with_headers);
    }
    if let Some(h) = hub.hub {
        let h = match h {
            HubArg::Huggingface => vram_hub::Hub::HuggingFace,
            HubArg::Modelscope => vram_hub::Hub::ModelScope,
        };
        return from_hub(h, arg, hub.revision.as_deref(), false).map(with_headers);
    }
    let path = Path::new(arg);
    if path.exists() {
        if hub.revision.is_some() {
            return Err(bad_input!(
                "--revision is for a Hub id; `{arg}` is a local path (--hub huggingface reads the Hub's)"
            ));
        }
        if arg.contains('/') && vram_hub::is_repo_id(arg) {
            crate::output::note_later(format!(
                "the local {} {arg} shadows the Hub id {arg} (--hub huggingface reads the Hub's)",
                if path.is_dir() { "folder" } else { "file" }
            ));
        }
        let mut r = resolve_local(arg, path)?;
        r.origin = Origin::Local;
        return Ok(with_headers(r));
    }
    match catalog::lookup(arg) {
        Ok(model) => {
            if hub.revision.is_some() {
                return Err(bad_input!(
                    "--revision is for a Hub id; `{arg}` is a built-in catalog id"
                ));
            }
            Ok(Resolved {
                model,
                checkpoint: None,
                config: catalog::config_text(arg).map(str::to_string),
                origin: Origin::Catalog,
            })
        }
        Err(_) if arg.contains('/') && vram_hub::is_repo_id(arg) => from_hub(
            vram_hub::Hub::HuggingFace,
            arg,
            hub.revision.as_deref(),
            true,
        )
        .map(with_headers),
        Err(e) if looks_like_path(arg) => {
            drop(e);
            Err(bad_input!("no such file or folder: {arg}"))
        }
        Err(e) => Err(e.into()),
    }
}

/// A checkpoint's headers decide its stored bytes (`Blocks::apply_headers`); where they
/// contradict the config's format, a note gives both figures. The note joins the model's
/// notes (`Blocks::notes`), which the estimate and capacity reports carry into text, `--json`
/// and HTML alike.
fn with_headers(mut r: Resolved) -> Resolved {
    if let (Model::Transformer(t), Some(tally)) = (&mut r.model, &r.checkpoint) {
        let notes = t.blocks.apply_headers(tally);
        t.blocks.notes.extend(notes);
    }
    r
}

/// A vram-hub error as the CLI reports it: bad input (exit 2), one line.
fn hub_err(e: vram_hub::Error) -> anyhow::Error {
    bad_input!("{e}")
}

/// A model from a hub: config.json (and a vision-language model's preprocessor_config.json),
/// then the checkpoint's headers, which cross-check the config as a local checkpoint's do.
/// `auto`: the argument was taken for a Hub id because no path or catalog id had its name.
fn from_hub(hub: vram_hub::Hub, id: &str, revision: Option<&str>, auto: bool) -> Result<Resolved> {
    let cfg = vram_hub::Config::from_env(hub).map_err(hub_err)?;
    let mut repo = vram_hub::open(&cfg, id, revision).map_err(|e| match e {
        vram_hub::Error::RepoNotFound { .. } if auto => {
            bad_input!("{e}; nor is there a local file or folder {id}")
        }
        e => hub_err(e),
    })?;
    let text = repo.text("config.json").map_err(hub_err)?;
    let label = repo.label();
    let mut model = hf::parse_config(&text, id).with_context(|| format!("{label} config.json"))?;
    let mut notes: Vec<String> = Vec::new();
    if has_vision_tower(&model) {
        if let Some(p) = repo
            .optional_text("preprocessor_config.json")
            .map_err(hub_err)?
        {
            for c in hf::apply_preprocessor(&mut model, &p)
                .with_context(|| format!("{label} preprocessor_config.json"))?
            {
                notes.push(format!("preprocessor_config.json sets {c}"));
            }
        }
        if let Some(p) = repo
            .optional_text("video_preprocessor_config.json")
            .map_err(hub_err)?
        {
            for c in hf::apply_video_preprocessor(&mut model, &p)
                .with_context(|| format!("{label} video_preprocessor_config.json"))?
            {
                notes.push(format!("video_preprocessor_config.json sets {c}"));
            }
        }
    }
    let mut tally = None;
    if let Some(index) = repo
        .optional_text("model.safetensors.index.json")
        .map_err(hub_err)?
    {
        let shards = safetensors_header::index_shards(&index)
            .with_context(|| format!("{label} model.safetensors.index.json"))?;
        let mut t = Tally::default();
        for shard in shards {
            let Some(s) = repo.safetensors_header(&shard).map_err(hub_err)? else {
                return Err(bad_input!(
                    "{label}: model.safetensors.index.json lists {shard}, which is not in the repo"
                ));
            };
            t.add_header(&s.header, s.size)
                .with_context(|| format!("{label} {shard}"))?;
        }
        tally = Some(t);
    } else if let Some(s) = repo
        .safetensors_header("model.safetensors")
        .map_err(hub_err)?
    {
        let mut t = Tally::default();
        t.add_header(&s.header, s.size)
            .with_context(|| format!("{label} model.safetensors"))?;
        tally = Some(t);
    }
    let mut err = crate::output::stderr();
    for n in repo.notes().iter().chain(&notes) {
        let _ = writeln!(err, "note: {n}");
    }
    cross_check(&model, tally.as_ref(), &label)?;
    Ok(Resolved {
        checkpoint: tally,
        model,
        config: Some(text),
        origin: Origin::Hub(label),
    })
}

fn has_vision_tower(model: &Model) -> bool {
    matches!(model, Model::Transformer(t) if t.blocks.vision.is_some())
}

/// A checkpoint whose headers contradict its config is refused, naming both.
fn cross_check(model: &Model, tally: Option<&Tally>, what: &str) -> Result<()> {
    if let (Model::Transformer(t), Some(tally)) = (model, tally) {
        if let Some(c) = tally.contradiction(t.vocab(), t.hidden()) {
            return Err(bad_input!(
                "{what}: the checkpoint's headers contradict config.json: {c}"
            ));
        }
    }
    Ok(())
}

/// A local path: a folder with config.json (and its checkpoint), a config file, a
/// .safetensors file or an index.
fn resolve_local(arg: &str, path: &Path) -> Result<Resolved> {
    if path.is_dir() {
        let config = path.join("config.json");
        if !config.is_file() {
            return Err(bad_input!("folder {} has no config.json", path.display()));
        }
        let text = read_text(&config, "config")?;
        let name = name_or_path(&text).unwrap_or_else(|| folder_name(path));
        let mut model =
            hf::parse_config(&text, &name).with_context(|| format!("{}", config.display()))?;
        let pre = path.join("preprocessor_config.json");
        if has_vision_tower(&model) && pre.is_file() {
            let p = read_text(&pre, "preprocessor config")?;
            for c in hf::apply_preprocessor(&mut model, &p)
                .with_context(|| format!("{}", pre.display()))?
            {
                let _ = writeln!(
                    crate::output::stderr(),
                    "note: preprocessor_config.json sets {c}"
                );
            }
        }
        let video = path.join("video_preprocessor_config.json");
        if has_vision_tower(&model) && video.is_file() {
            let p = read_text(&video, "video preprocessor config")?;
            for c in hf::apply_video_preprocessor(&mut model, &p)
                .with_context(|| format!("{}", video.display()))?
            {
                let _ = writeln!(
                    crate::output::stderr(),
                    "note: video_preprocessor_config.json sets {c}"
                );
            }
        }
        let tally = checkpoint_beside(path)?;
        cross_check(&model, tally.as_ref(), &path.display().to_string())?;
        return Ok(Resolved {
            model,
            checkpoint: tally,
            config: Some(text),
            origin: Origin::Local,
        });
    }
    if arg.ends_with(".safetensors") {
        let mut tally = Tally::default();
        read_header(path, &mut tally)?;
        if tally.elements.is_empty() {
            // A header with no tensor (`{}` or `__metadata__` alone) is no model's weights.
            return Err(bad_input!(
                "{}: the safetensors header holds no tensor",
                path.display()
            ));
        }
        return Ok(Resolved {
            model: Model::Weights(tally.weights(&file_name(path))),
            checkpoint: Some(tally),
            config: None,
            origin: Origin::Local,
        });
    }
    let text = read_text(path, "file")?;
    if arg.ends_with(".index.json") || text.contains("\"weight_map\"") {
        let tally = read_index(path, &text)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        return Ok(Resolved {
            model: Model::Weights(tally.weights(&folder_name(dir))),
            checkpoint: Some(tally),
            config: None,
            origin: Origin::Local,
        });
    }
    // A config file is named by `_name_or_path` inside it, else by its own stem
    // (`configs/gpt2.json` is "gpt2"), never by the folder that holds it.
    let name = name_or_path(&text).unwrap_or_else(|| file_stem(path));
    let model = hf::parse_config(&text, &name).with_context(|| format!("{}", path.display()))?;
    Ok(Resolved {
        model,
        checkpoint: None,
        config: Some(text),
        origin: Origin::Local,
    })
}

fn looks_like_path(arg: &str) -> bool {
    arg.contains('/')
        || arg.contains('\\')
        || arg.ends_with(".json")
        || arg.ends_with(".safetensors")
}

fn folder_name(p: &Path) -> String {
    let abs = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    shown_name(abs.file_name())
}

fn file_name(p: &Path) -> String {
    shown_name(p.file_name())
}

fn file_stem(p: &Path) -> String {
    shown_name(p.file_stem())
}

/// A file or folder's name as it heads every answer (`model` when there is none), control
/// characters and bidirectional overrides written escaped ([`crate::output::escape_hidden`]),
/// as a `_name_or_path` holding one is not used: a folder named with a line break or an escape
/// sequence neither splits the answer's first line nor reaches the terminal.
fn shown_name(name: Option<&std::ffi::OsStr>) -> String {
    name.map_or_else(
        || "model".into(),
        |n| crate::output::escape_hidden(&n.to_string_lossy()),
    )
}

/// The last path component of a config's `_name_or_path` (`meta-llama/Llama-3.1-8B` gives
/// `Llama-3.1-8B`), when it is a non-empty string without control characters or bidirectional
/// overrides ([`crate::output::is_hidden_char`]): the name heads
/// every answer, and a config from the Hub is anyone's text (a newline would split the report's
/// first line, an escape sequence would reach the terminal); such a config is named by its file
/// or folder instead.
fn name_or_path(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let s = v
        .get("_name_or_path")?
        .as_str()?
        .trim()
        .trim_end_matches(['/', '\\']);
    let last = s.rsplit(['/', '\\']).next()?.trim();
    (!last.is_empty() && !last.chars().any(crate::output::is_hidden_char)).then(|| last.to_string())
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

fn read_index(index: &Path, text: &str) -> Result<Tally> {
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
    Ok(tally)
}

/// The tensors of a checkpoint beside a config.json, if the folder holds one.
fn checkpoint_beside(dir: &Path) -> Result<Option<Tally>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = read_text(&index, "index")?;
        return read_index(&index, &text).map(Some);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        let mut tally = Tally::default();
        read_header(&single, &mut tally)?;
        return Ok(Some(tally));
    }
    Ok(None)
}

/// Parses a byte size: `1234` (bytes), or a number and a unit as `--gpu` takes one (`500MiB`,
/// `8GiB`, `1.5GB`, `80G`: [`vram_model::gpu::size_bytes`], the one spelling of every size flag).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let bytes = if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        t.parse::<f64>().ok()
    } else {
        vram_model::gpu::size_bytes(t)
    }
    .ok_or_else(|| {
        const UNITS: &str = "B, KiB, MiB, GiB, TiB or K, M, G, T; KB, MB, GB, TB";
        let unit = t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.').trim();
        if unit.len() < t.len() && unit.chars().all(|c| c.is_ascii_alphabetic()) {
            format!("unknown unit `{unit}` in `{s}` (use {UNITS})")
        } else {
            format!("`{s}` is not a size: a number of bytes, or a number and a unit ({UNITS}), e.g. 500MiB or 8GiB")
        }
    })?;
    if bytes >= 2f64.powi(62) {
        return Err(format!("`{s}` is too large"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::{file_stem, folder_name, name_or_path, parse_bytes};
    use std::path::Path;

    #[test]
    fn config_files_are_named_by_themselves() {
        assert_eq!(file_stem(Path::new("configs/gpt2.json")), "gpt2");
        assert_eq!(
            file_stem(Path::new("dir/evil\nline\u{1b}[31mred.json")),
            r"evil\u{a}line\u{1b}[31mred"
        );
        assert_eq!(
            folder_name(Path::new("no-such-dir/evil\u{202e}name")),
            r"evil\u{202e}name"
        );
        assert_eq!(
            name_or_path(r#"{"_name_or_path": "meta-llama/Llama-3.1-8B", "model_type": "llama"}"#),
            Some("Llama-3.1-8B".into())
        );
        assert_eq!(name_or_path(r#"{"_name_or_path": ""}"#), None);
        assert_eq!(name_or_path(r#"{"model_type": "gpt2"}"#), None);
        assert_eq!(
            name_or_path(r#"{"_name_or_path": "org/evil\nline\u001b[31m"}"#),
            None
        );
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
        // The spellings --gpu takes, through the one parser.
        for s in [
            "24GB",
            "23.58GiB",
            "80G",
            "80g",
            "24 GB",
            "15636037632B",
            "1.5gib",
        ] {
            assert_eq!(parse_bytes(s).ok(), vram_model::gpu::parse_size(s), "{s}");
        }
    }
}
