//! Which architectures each engine release can load: the model registry of every final vLLM
//! release 0.5.0–0.26.0 (`_VLLM_MODELS`) and SGLang 0.4.0–0.5.23 (`EntryClass` of
//! `srt/models/*.py`), generated into `data/engine-archs.tsv` by `data/engine-archs.py`. The
//! table holds releases vram does not model ([`Engine::unmodelled`]); a default moves only to
//! one it models.
//!
//! The engine looks the config's `architectures` up at start-up (vLLM
//! `ModelRegistry.inspect_model_cls`, SGLang `get_model_architecture`): any one of them in the
//! registry loads; none refuses with the release's own `ValueError` (or, where vLLM lists the
//! architecture in `_PREVIOUSLY_SUPPORTED_MODELS`, its "was supported in vLLM until" one, and
//! from 0.19.0 in `_OOT_SUPPORTED_MODELS`, its "not supported in-tree anymore" one: each in the
//! words of the release asked for).
//! Releases that fall back to a Transformers backend (vLLM from 0.7.2, SGLang from 0.4.7) try
//! that first, which loads only where the installed transformers has a compatible class.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::*;

const TABLE: &str = include_str!("../../data/engine-archs.tsv");

/// `0.5.3.post1` → `[0, 5, 3, 1]`.
type Rel = [u32; 4];

fn rel(s: &str) -> Rel {
    let mut out = [0; 4];
    for (i, n) in s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .take(4)
        .enumerate()
    {
        out[i] = n.parse().unwrap_or(0);
    }
    out
}

/// An engine and an architecture string, as the table names them.
type Key = (&'static str, &'static str);

/// Runs of consecutive releases, first and last (`None`: to the newest read).
type Runs = Vec<(Rel, Option<Rel>)>;

struct Release {
    version: Rel,
    label: &'static str,
    fallback: bool,
    words: &'static str,
}

#[derive(Default)]
struct Table {
    releases: HashMap<&'static str, Vec<Release>>,
    /// (engine, architecture) → the runs of releases that have it (`None`: to the newest read).
    archs: HashMap<Key, Runs>,
    /// (engine, architecture) → the refusals releases word for it by name, in release order:
    /// the first release that words it so, and the words (`-`: from this release, none).
    dropped: HashMap<Key, Vec<(Rel, &'static str)>>,
}

/// The table `text` describes; a line of no known kind, or with a field missing, is an error
/// naming it (the table is generated, so one is a bug in the generator, never skipped).
fn parse_table(text: &'static str) -> std::result::Result<Table, String> {
    let mut t = Table::default();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let f: Vec<&'static str> = line.split('\t').collect();
        match f[..] {
            ["release", e, v, _, fallback @ ("yes" | "no"), words] => {
                t.releases.entry(e).or_default().push(Release {
                    version: rel(v),
                    label: v,
                    fallback: fallback == "yes",
                    words,
                })
            }
            ["arch", e, a, runs] => {
                let runs = runs
                    .split(',')
                    .map(|r| {
                        let (x, y) = r.split_once("..")?;
                        Some((rel(x), (y != "-").then(|| rel(y))))
                    })
                    .collect::<Option<Runs>>()
                    .ok_or_else(|| format!("engine-archs.tsv line {}: runs `{runs}`", n + 1))?;
                t.archs.insert((e, a), runs);
            }
            ["dropped", e, a, v, words] => {
                t.dropped.entry((e, a)).or_default().push((rel(v), words));
            }
            _ => return Err(format!("engine-archs.tsv line {}: `{line}`", n + 1)),
        }
    }
    Ok(t)
}

fn table() -> Result<&'static Table> {
    static T: OnceLock<std::result::Result<Table, String>> = OnceLock::new();
    T.get_or_init(|| parse_table(TABLE))
        .as_ref()
        .map_err(|e| Error::Capacity(format!("the engines' model registries: {e}")))
}

fn has(t: &Table, e: Engine, arch: &str, r: Rel) -> bool {
    t.archs.get(&(e.name(), arch)).is_some_and(|runs| {
        runs.iter()
            .any(|&(a, b)| a <= r && b.is_none_or(|b| r <= b))
    })
}

/// What the model registry makes of the config's `architectures` at the version in force.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryCheck {
    /// The version to run instead of the one in force (the default's series lacks the
    /// architecture, or a pinned `major.minor` has it only from a later patch).
    pub version: Option<[u32; 3]>,
    /// What the report says about it.
    pub note: Option<String>,
}

/// Checks `archs` (the config's `architectures`) against the engine's model registry at the
/// version in force ([`Knobs::engine_version`]; [`Knobs::engine_pin`]: one naming no patch,
/// `0.8`, or none, the default `major.minor`, may be any release of that series). A pinned version whose releases all lack
/// the architecture is refused with the release's own message and the first release that has
/// it; the default moves to the nearest release that has it, said in the note.
pub fn registry_check(engine: Engine, archs: &[String], k: &Knobs) -> Result<RegistryCheck> {
    let t = table()?;
    let Some(releases) = t.releases.get(engine.name()) else {
        return Ok(RegistryCheck::default());
    };
    let pinned = k.engine_version.is_some();
    let post = match k.engine_pin {
        Pin::Release { post } if pinned => Some(post),
        _ => None,
    };
    let series = post.is_none();
    let label = version_label(engine, k);
    let v = parse_version(&label).unwrap_or([0, 0, 0]);
    let loads = |r: &Release| archs.iter().any(|a| has(t, engine, a, r.version));
    // The releases the version names: its `major.minor`, or the newest at or before it.
    let named: Vec<&Release> = if series {
        releases
            .iter()
            .filter(|r| r.version[..2] == v[..2])
            .collect()
    } else {
        let at = [v[0], v[1], v[2], post.unwrap_or(0)];
        releases
            .iter()
            .rev()
            .find(|r| r.version <= at)
            .into_iter()
            .collect()
    };
    if archs.is_empty() || named.is_empty() || loads(named[0]) {
        return Ok(RegistryCheck::default());
    }
    let name = engine.label();
    let list = archs.join(", ");
    let three = |r: &Release| [r.version[0], r.version[1], r.version[2]];
    if let Some(r) = named.iter().find(|r| loads(r)) {
        return Ok(RegistryCheck {
            version: Some(three(r)),
            note: Some(format!(
                "{name} {label}{}: its first release {} has no {list} in its model registry; {} is the first {name} {label} release that has it, and its figures are those here",
                if pinned { "" } else { " (the default)" },
                named[0].label,
                r.label
            )),
        });
    }
    // The release whose refusal is quoted: the newest the version names.
    let at = named[named.len() - 1];
    let later = releases.iter().find(|r| r.version > at.version && loads(r));
    let nearest = later.or_else(|| releases.iter().rev().find(|r| loads(r)));
    let Some(nearest) = nearest else {
        // In no release's registry: only a Transformers backend could load it.
        return Ok(RegistryCheck {
            version: None,
            note: Some(format!(
                "{list} is in no {name} release's model registry ({} to {}); {name} {} loads it only {}",
                releases[0].label,
                releases[releases.len() - 1].label,
                at.label,
                if at.fallback {
                    "through its Transformers backend, where the installed transformers has a compatible class"
                } else {
                    "not at all (this release has no Transformers backend)"
                }
            )),
        });
    };
    if pinned {
        let python_list = format!(
            "[{}]",
            archs
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // The release's own words for the first of the architectures it names (its
        // `_raise_for_unsupported` loops over them in order; the newest wording at or before
        // the release), else its generic refusal.
        let named_words = archs.iter().find_map(|a| {
            t.dropped
                .get(&(engine.name(), a.as_str()))
                .and_then(|w| w.iter().rev().find(|&&(since, _)| since <= at.version))
                .map(|&(_, words)| words)
                .filter(|&w| w != "-")
        });
        let refusal = match named_words {
            Some(words) => words.to_string(),
            None => format!(
                "{} Supported architectures: …",
                at.words.replace("{architectures}", &python_list)
            ),
        };
        let first = releases.iter().find(|r| loads(r)).unwrap_or(nearest);
        let last = releases.iter().rev().find(|r| loads(r)).unwrap_or(nearest);
        let span = if last.version < at.version {
            format!("from {} to {}", first.label, last.label)
        } else {
            format!("from {}", first.label)
        };
        return Err(Error::Capacity(format!(
            "{name} {} refuses this: ValueError: {refusal} ({list} is in {name}'s model registry {span}{})",
            if series && named.len() > 1 {
                format!("{label} ({} to {})", named[0].label, at.label)
            } else {
                at.label.to_string()
            },
            if at.fallback {
                "; this release's Transformers-backend fallback loads it only where the installed transformers has a compatible class"
            } else {
                ""
            }
        )));
    }
    // The default moves only to a release vram models (the table reads releases past those).
    let modelled = |r: &&Release| engine.unmodelled(three(r)).is_none();
    let later = releases
        .iter()
        .filter(modelled)
        .find(|r| r.version > at.version && loads(r));
    let Some(nearest) = later.or_else(|| releases.iter().filter(modelled).rev().find(|r| loads(r)))
    else {
        return Ok(RegistryCheck {
            version: None,
            note: Some(format!(
                "{list} is in {name}'s model registry only from {}, a release vram does not model; {name} {label} (the default) loads it only {}",
                nearest.label,
                if at.fallback {
                    "through its Transformers backend, where the installed transformers has a compatible class"
                } else {
                    "not at all (this release has no Transformers backend)"
                }
            )),
        });
    };
    Ok(RegistryCheck {
        version: Some(three(nearest)),
        note: Some(format!(
            "{name} {label} (the default) has no {list} in its model registry; the figures are {name} {}'s, the {} release that has it (--engine-version picks another)",
            nearest.label,
            if nearest.version > at.version { "first" } else { "last" }
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed table parses whole: every line a release, an architecture's runs or a
    /// refusal, none skipped (a malformed line is an error, and this test says which).
    #[test]
    fn the_committed_table_parses_fully() {
        let t = parse_table(TABLE).unwrap();
        let data = TABLE.lines().filter(|l| !l.starts_with('#'));
        let kinds = |k: &str| data.clone().filter(|l| l.starts_with(k)).count();
        let releases: usize = t.releases.values().map(Vec::len).sum();
        assert_eq!(releases, kinds("release\t"));
        assert_eq!(t.archs.len(), kinds("arch\t"));
        let dropped: usize = t.dropped.values().map(Vec::len).sum();
        assert_eq!(dropped, kinds("dropped\t"));
        assert_eq!(
            data.clone().count(),
            kinds("release\t") + kinds("arch\t") + kinds("dropped\t")
        );
        assert!(t.releases["vllm"].len() > 50 && t.releases["sglang"].len() > 50);
        assert!(parse_table("arch\tvllm\tX\n").is_err());
        assert!(parse_table("arch\tvllm\tX\t0.5.0\n").is_err());
        assert!(parse_table("release\tvllm\t0.5.0\tf\tmaybe\tw\n").is_err());
    }
}
