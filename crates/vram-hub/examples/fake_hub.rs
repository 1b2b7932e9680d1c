//! The loopback hub as a process, for the Python tests: serves each `DIR/org/name/` folder
//! as a repo (`*.safetensors` as LFS files behind the CDN redirect), prints the endpoint on
//! its first line, and stops when its standard input closes.
//!
//! `cargo build -p vram-hub --features fake --example fake_hub`, then
//! `fake_hub DIR [--token TOKEN]...`.

use std::io::{Read, Write};
use std::path::Path;

use vram_hub::fake::{FakeFile, FakeHub};

/// A repo id and its files.
type FakeRepo = (String, Vec<(String, FakeFile)>);

fn repos(dir: &Path) -> std::io::Result<Vec<FakeRepo>> {
    let mut out = Vec::new();
    let mut orgs: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    orgs.sort_by_key(|e| e.file_name());
    for org in orgs.into_iter().filter(|e| e.path().is_dir()) {
        let mut names: Vec<_> = std::fs::read_dir(org.path())?.collect::<Result<_, _>>()?;
        names.sort_by_key(|e| e.file_name());
        for name in names.into_iter().filter(|e| e.path().is_dir()) {
            let mut files = Vec::new();
            let mut entries: Vec<_> = std::fs::read_dir(name.path())?.collect::<Result<_, _>>()?;
            entries.sort_by_key(|e| e.file_name());
            for f in entries.into_iter().filter(|e| e.path().is_file()) {
                let file = f.file_name().to_string_lossy().into_owned();
                let bytes = std::fs::read(f.path())?;
                let fake = if file.ends_with(".safetensors") {
                    let len = bytes.len() as u64;
                    FakeFile::lfs(bytes, len)
                } else {
                    FakeFile::bytes(bytes)
                };
                files.push((file, fake));
            }
            let id = format!(
                "{}/{}",
                org.file_name().to_string_lossy(),
                name.file_name().to_string_lossy()
            );
            out.push((id, files));
        }
    }
    Ok(out)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: fake_hub DIR [--token TOKEN]...");
        std::process::exit(2);
    };
    let tokens: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--token")
        .map(|w| w[1].as_str())
        .collect();
    let hub = FakeHub::start();
    hub.accept_tokens(&tokens);
    match repos(Path::new(dir)) {
        Ok(repos) => {
            for (id, files) in repos {
                hub.add_repo(
                    &id,
                    files.iter().map(|(n, f)| (n.as_str(), f.clone())).collect(),
                );
            }
        }
        Err(e) => {
            eprintln!("fake_hub: cannot read {dir}: {e}");
            std::process::exit(2);
        }
    }
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", hub.endpoint);
    let _ = out.flush();
    // Until the test closes our standard input.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
