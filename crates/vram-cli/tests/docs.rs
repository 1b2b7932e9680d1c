//! README.md and ARCHITECTURE.md stay true to the tree: every repository path they name in
//! backticks (or link to) exists, and every `module::item` or `Type::member` they name is
//! defined in the crates' source. A grep-level check: a name resolves when its crate's module
//! chain exists (`vram_model::hf::parse_config`: the `hf` module, by file or by `pub use X as
//! hf`) and each later segment is defined there (fn, struct, enum, variant, field, const, type,
//! trait, mod, static, macro or `pub use`); a name without a crate prefix resolves when each of
//! its segments is defined somewhere in the crates. Code blocks are skipped (the README's run
//! as tests in `readme.rs`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// File names in backticks that are no file of this tree and are not checked, each with why.
const NOT_OURS: &[&str] = &[
    // A model folder's files on the Hub, which vram reads; none is in the tree by that name.
    "config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    // vLLM's `vllm/config/compilation.py` and huggingface_hub's `file_download.py`, cited
    // as the sources read.
    "config/compilation.py",
    "file_download.py",
];

/// Extensions of the file names the documents cite bare (`live_peak.py`, `public.txt`).
const FILE_EXTENSIONS: &[&str] = &[
    ".rs", ".py", ".md", ".toml", ".json", ".jsonl", ".txt", ".yml", ".yaml", ".sh", ".csv",
    ".pickle",
];

/// Every file of the tree (build outputs, VCS and caches apart), as paths from the root.
fn tree_files(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if matches!(
            name.as_str(),
            "target" | ".git" | "node_modules" | ".venv" | "__pycache__"
        ) {
            continue;
        }
        let r = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if e.path().is_dir() {
            tree_files(&e.path(), &r, out);
        } else {
            out.push(r);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn read_all(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names `text` defines: items, fields and variants, and what it re-exports.
fn defined(text: &str) -> HashSet<String> {
    const KEYWORDS: &[&str] = &[
        "fn ",
        "struct ",
        "enum ",
        "mod ",
        "const ",
        "type ",
        "trait ",
        "static ",
        "macro_rules! ",
        "union ",
    ];
    let mut out = HashSet::new();
    for line in text.lines() {
        let mut l = line.trim_start();
        let is_use = l.starts_with("use ") || l.starts_with("pub use ");
        for p in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ] {
            l = l.strip_prefix(p).unwrap_or(l);
        }
        if is_use {
            out.extend(l.split(|c: char| !is_ident(c)).map(str::to_string));
            continue;
        }
        let ident = |s: &str| {
            s.split(|c: char| !is_ident(c))
                .next()
                .unwrap_or("")
                .to_string()
        };
        if let Some(k) = KEYWORDS.iter().find(|k| l.starts_with(**k)) {
            out.insert(ident(&l[k.len()..]));
        }
        // A field (`name: T`), a variant (`Name,` `Name(..)` `Name {`) or a unit variant.
        let first = ident(l);
        if !first.is_empty()
            && matches!(
                l[first.len()..].trim_start().chars().next(),
                Some(':' | '(' | '{' | ',' | '=') | None
            )
        {
            out.insert(first);
        }
    }
    out.remove("");
    out
}

/// The crates: `vram_model` → (its folder, its lib.rs aliases `pub use X as Y`).
struct Crates {
    dirs: HashMap<String, PathBuf>,
    every_source: HashSet<String>,
}

impl Crates {
    fn load() -> Crates {
        let mut dirs = HashMap::new();
        let mut all = Vec::new();
        for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
            let p = e.path();
            if p.join("src").is_dir() {
                let name = e.file_name().to_string_lossy().replace('-', "_");
                rust_files(&p.join("src"), &mut all);
                dirs.insert(name, p);
            }
        }
        Crates {
            dirs,
            every_source: defined(&read_all(&all)),
        }
    }

    /// The files of module `mods` (a chain) in crate folder `dir`; `None` if one is missing.
    fn module_files(&self, dir: &Path, mods: &[&str]) -> Option<Vec<PathBuf>> {
        let mut base = dir.join("src");
        for (i, m) in mods.iter().enumerate() {
            // `pub use read as hf;` in the parent module.
            let parent = if i == 0 {
                base.join("lib.rs")
            } else if base.join("mod.rs").exists() {
                base.join("mod.rs")
            } else {
                base.with_extension("rs")
            };
            let parent_text = std::fs::read_to_string(&parent).unwrap_or_default();
            let real = parent_text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("pub use "))
                .find_map(|l| {
                    let l = l.trim_end_matches(';');
                    match l.split_once(" as ") {
                        // `pub use read as hf;`: `hf` is `read`.
                        Some((from, alias)) => (alias.trim() == *m)
                            .then(|| from.rsplit("::").next().unwrap().to_string()),
                        // `pub use walk::trace;`: `trace` is `walk/trace`.
                        None => {
                            let (path, last) = l.rsplit_once("::")?;
                            (last == *m).then(|| format!("{}/{m}", path.replace("::", "/")))
                        }
                    }
                })
                .unwrap_or_else(|| m.to_string());
            let next = base.join(&real);
            if next.is_dir() {
                base = next;
            } else if next.with_extension("rs").is_file() {
                base = next;
                if i + 1 == mods.len() {
                    let mut files = vec![base.with_extension("rs")];
                    rust_files(&base, &mut files);
                    return Some(files);
                }
            } else {
                return None;
            }
        }
        let mut files = Vec::new();
        rust_files(&base, &mut files);
        if let Some(f) = Some(base.with_extension("rs")).filter(|f| f.is_file()) {
            files.push(f);
        }
        Some(files)
    }

    /// Why `name` (`a::b::c`, `()` stripped) does not resolve, or `None` when it does.
    fn unresolved(&self, name: &str) -> Option<String> {
        let segs: Vec<&str> = name.split("::").collect();
        if let Some(dir) = self.dirs.get(segs[0]) {
            let mut mods = Vec::new();
            let mut rest = &segs[1..];
            while rest.len() > 1 && rest[0].starts_with(|c: char| c.is_ascii_lowercase()) {
                mods.push(rest[0]);
                rest = &rest[1..];
            }
            let Some(files) = self.module_files(dir, &mods) else {
                return Some(format!("no module {}::{}", segs[0], mods.join("::")));
            };
            let here = defined(&read_all(&files));
            // The first item is defined in its module (or re-exported there); members of a
            // type may be defined in an `impl` anywhere in the crates.
            let first = rest[0];
            if !here.contains(first) && !self.every_source.contains(first) {
                return Some(format!("no {first}"));
            }
            return rest[1..]
                .iter()
                .find(|s| !self.every_source.contains(**s))
                .map(|s| format!("no {s}"));
        }
        segs.iter()
            .filter(|s| !self.dirs.contains_key(**s) && **s != "crate")
            .find(|s| !self.every_source.contains(**s))
            .map(|s| format!("no {s}"))
    }
}

/// The inline code spans and link targets of `text`, fenced blocks skipped.
fn spans(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut code, mut links) = (Vec::new(), Vec::new());
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        code.extend(
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(|s| s.trim().to_string()),
        );
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(j) = rest.find(')') {
                links.push(rest[..j].to_string());
            }
        }
    }
    (code, links)
}

const TOP: &[&str] = &[
    "crates/", "python/", "docs/", "tests/", "gpu/", "fuzz/", ".ci/", "src/", "benches/", "vram-",
];

fn path_like(s: &str) -> bool {
    s.contains('/')
        && s.chars()
            .all(|c| is_ident(c) || matches!(c, '.' | '-' | '/'))
        && TOP.iter().any(|t| s.starts_with(t))
}

/// A path named in a doc resolves against the root, `crates/`, or one crate's folder (the
/// docs name a crate's `tests/it/…` or `src/…` inside the paragraph about that crate).
fn path_exists(p: &str) -> bool {
    let p = p.trim_end_matches('/');
    let root = root();
    root.join(p).exists()
        || root.join("crates").join(p).exists()
        || std::fs::read_dir(root.join("crates"))
            .unwrap()
            .flatten()
            .any(|e| e.path().join(p).exists())
}

/// A file name (or a path outside the top folders) with one of [`FILE_EXTENSIONS`].
fn file_like(s: &str) -> bool {
    s.chars()
        .all(|c| is_ident(c) || matches!(c, '.' | '-' | '/'))
        && FILE_EXTENSIONS.iter().any(|e| s.ends_with(e))
}

fn name_like(s: &str) -> Option<&str> {
    let s = s.strip_suffix("()").unwrap_or(s);
    let ok = s.contains("::")
        && s.split("::").all(|seg| {
            !seg.is_empty()
                && seg.chars().all(is_ident)
                && !seg.starts_with(|c: char| c.is_ascii_digit())
        });
    ok.then_some(s)
}

/// (paths checked, names checked, what does not resolve) in one document's text.
fn check(text: &str, crates: &Crates) -> (usize, usize, Vec<String>) {
    let (code, links) = spans(text);
    let (mut paths, mut names, mut stale) = (0, 0, Vec::new());
    let mut tree = Vec::new();
    tree_files(&root(), "", &mut tree);
    let local_links: Vec<&String> = links
        .iter()
        .filter(|l| !l.contains("://") && !l.starts_with('#') && !l.starts_with("mailto:"))
        .collect();
    for l in &local_links {
        let l = l.split('#').next().unwrap();
        paths += 1;
        if !root().join(l).exists() {
            stale.push(format!("link `{l}` does not exist"));
        }
    }
    for s in &code {
        let s = s.as_str();
        if NOT_OURS.contains(&s) {
            continue;
        }
        if path_like(s) {
            paths += 1;
            if !path_exists(s) {
                stale.push(format!("path `{s}` does not exist"));
            }
        } else if file_like(s) {
            paths += 1;
            if !tree.iter().any(|f| f == s || f.ends_with(&format!("/{s}"))) {
                stale.push(format!("file `{s}` is nowhere in the tree"));
            }
        } else if let Some(n) = name_like(s) {
            names += 1;
            if let Some(why) = crates.unresolved(n) {
                stale.push(format!("`{s}`: {why}"));
            }
        }
    }
    (paths, names, stale)
}

#[test]
fn readme_and_architecture_name_only_paths_and_items_that_exist() {
    let crates = Crates::load();
    let mut stale = Vec::new();
    let mut counts = Vec::new();
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let (p, n, s) = check(&text, &crates);
        eprintln!("{doc}: {p} paths, links and files, {n} names checked");
        counts.push((doc, p, n));
        stale.extend(s.into_iter().map(|s| format!("{doc}: {s}")));
    }
    // The check reads what the documents name: a parser that found nothing would pass.
    let (_, arch_paths, arch_names) = counts[1];
    assert!(
        arch_paths >= 50 && arch_names >= 200,
        "ARCHITECTURE.md: {arch_paths} paths, {arch_names} names read"
    );
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

/// The checker flags what is stale: a missing file, a missing module, a missing item.
#[test]
fn the_docs_check_flags_a_stale_path_module_and_item() {
    let crates = Crates::load();
    let doc = "See `crates/vram-model/src/read/mod.rs` and `vram_model::hf::parse_config`, \
               `vram_model::blocks::CacheLayout`, `Knobs::engine_version`.\n\
               Stale: `crates/vram-model/src/nope.rs`, `vram_model::nope::parse_config`, \
               `vram_model::hf::no_such_fn`, `Knobs::no_such_field`, [a link](docs/nope.md), \
               `no_such_reference.py` beside `live_peak.py`.\n\
               ```\n`crates/inside/a/code/block.rs`\n```\n";
    let (paths, names, stale) = check(doc, &crates);
    assert_eq!((paths, names), (5, 6), "{stale:?}");
    assert_eq!(stale.len(), 6, "{stale:#?}");
    for want in [
        "nope.rs",
        "no module vram_model::nope",
        "no no_such_fn",
        "no no_such_field",
        "docs/nope.md",
        "no_such_reference.py",
    ] {
        assert!(stale.iter().any(|s| s.contains(want)), "{want}: {stale:#?}");
    }
}
