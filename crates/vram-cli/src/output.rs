//! Standard output and error for the commands, which a library caller can capture.
//!
//! The commands write through [`stdout`] and [`stderr`] instead of `std::io`'s handles. In the
//! `vram` binary these are the process's streams; inside [`capture`] (the Python binding calls
//! the commands in-process) the bytes go into buffers of the calling thread instead, so the
//! same code produces the same text and the same one-line errors for both.

use std::cell::RefCell;
use std::io::{self, Write};

#[derive(Default)]
struct Buffers {
    out: Vec<u8>,
    err: Vec<u8>,
}

thread_local! {
    static CAPTURED: RefCell<Option<Buffers>> = const { RefCell::new(None) };
}

/// Which stream a [`Stream`] writes to.
#[derive(Debug, Clone, Copy)]
enum Which {
    Out,
    Err,
}

/// A writer for standard output or error: the process's stream, or the calling thread's
/// buffer while [`capture`] runs.
#[derive(Debug)]
pub struct Stream(Which);

/// Standard output of a command.
pub fn stdout() -> Stream {
    Stream(Which::Out)
}

/// Standard error of a command.
pub fn stderr() -> Stream {
    Stream(Which::Err)
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let captured = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
            Some(b) => {
                match self.0 {
                    Which::Out => b.out.extend_from_slice(buf),
                    Which::Err => b.err.extend_from_slice(buf),
                }
                true
            }
            None => false,
        });
        if captured {
            return Ok(buf.len());
        }
        match self.0 {
            Which::Out => io::stdout().lock().write(buf),
            Which::Err => io::stderr().lock().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.0 {
            Which::Out => io::stdout().flush(),
            Which::Err => io::stderr().flush(),
        }
    }
}

/// Whether `c` changes the terminal or the text's order instead of showing as itself: a control
/// character (C0, DEL, C1: line breaks, escape sequences) or a bidirectional override or
/// isolate (U+202A-U+202E, U+2066-U+2069). Text read from a file that reaches the answer or an
/// error line with one is written escaped, or not used.
pub fn is_hidden_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every [`is_hidden_char`] written escaped (`\u{1b}`), the rest as it is.
pub fn escape_hidden(s: &str) -> String {
    s.chars()
        .flat_map(|ch| {
            let hidden = is_hidden_char(ch);
            let esc = hidden.then(|| ch.escape_unicode());
            let plain = (!hidden).then_some(ch);
            esc.into_iter().flatten().chain(plain)
        })
        .collect()
}

thread_local! {
    static NOTES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a note on how the input was read until the command's outcome is known
/// ([`crate::main_from`]): its own `note:` line on standard error after a command that
/// succeeded, part of the one error line after one that failed.
pub fn note_later(note: String) {
    NOTES.with(|n| n.borrow_mut().push(note));
}

/// The notes kept by [`note_later`] since the last call, in order.
pub(crate) fn take_notes() -> Vec<String> {
    NOTES.with(|n| std::mem::take(&mut *n.borrow_mut()))
}

/// Whether this thread's output is being captured.
pub fn is_captured() -> bool {
    CAPTURED.with(|c| c.borrow().is_some())
}

/// Runs `f` with [`stdout`] and [`stderr`] going into buffers of this thread; returns `f`'s
/// result and what it wrote to each. Captures nest: the inner one sees only its own output.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<u8>, Vec<u8>) {
    struct Restore(Option<Buffers>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CAPTURED.with(|c| *c.borrow_mut() = outer);
        }
    }
    let outer = CAPTURED.with(|c| c.borrow_mut().replace(Buffers::default()));
    let restore = Restore(outer);
    let r = f();
    let mine = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(restore);
    (r, mine.out, mine.err)
}

/// Writes `bytes` to `path` whole: into a temporary file in the same folder, then renamed over
/// `path`, so a failure leaves neither a partial file nor a stray temporary one (and clobbers
/// nothing beside `path`). A path the user can fix (a missing folder, a folder, no permission)
/// is bad input (exit code 2); other I/O errors (a full disk) are failures.
///
/// A symbolic link is written through (its target is replaced, the link stays), and a path
/// that is not a regular file (`/dev/null`, `/dev/stdout`, a named pipe) is written to as
/// it is, as `fs::write` would: a rename would replace the device node itself (as root,
/// `-o /dev/null` turned `/dev/null` into a regular file) or fail on its folder's permissions.
pub fn write_file(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_files(&[(path, bytes)])
}

/// [`write_file`] for several files at once: every regular file is written to its temporary
/// before any is renamed into place, so a bad path or a full disk for one leaves none of them.
/// Streams (devices, pipes) are written after every temporary and before any rename: a stream
/// that fails leaves no regular file either (what a stream took cannot be taken back).
pub fn write_files(files: &[(&std::path::Path, &[u8])]) -> anyhow::Result<()> {
    let mut staged = Vec::with_capacity(files.len());
    let mut streams = Vec::new();
    let mut seen: Vec<std::path::PathBuf> = Vec::new();
    for &(path, bytes) in files {
        // A stream is opened by the name given, which the kernel resolves: `/dev/stdout` is a
        // link to `/proc/self/fd/1`, whose own link text for a pipe (`pipe:[N]`) names no file.
        let stream = is_stream(path);
        let target = if stream {
            path.to_path_buf()
        } else {
            follow_links(path)
        };
        // Two outputs that are one file (`trace --out x --events x`, or a link to the other):
        // the second would replace the first, and the first's line would name what is gone.
        let id = identity(&target);
        if seen.contains(&id) {
            return Err(anyhow::Error::new(crate::BadInput(format!(
                "two outputs name the same file {}: give each its own",
                path.display()
            ))));
        }
        seen.push(id);
        if stream {
            streams.push((path, target, bytes));
        } else {
            let tmp = stage(&target, bytes).map_err(|e| write_error(path, e))?;
            staged.push((path, target, tmp));
        }
    }
    for (path, target, bytes) in streams {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()))
            .map_err(|e| write_error(path, e))?;
    }
    for (path, target, tmp) in staged {
        tmp.persist(&target)
            .map_err(|e| write_error(path, e.error))?;
    }
    Ok(())
}

/// `path` with its symbolic links followed, as far as they lead (a dangling link gives the
/// path it names, which the write creates); `path` itself when it is not a link or the links
/// loop.
fn follow_links(path: &std::path::Path) -> std::path::PathBuf {
    let mut p = path.to_path_buf();
    // Linux's own limit on links followed in one lookup (MAXSYMLINKS).
    for _ in 0..40 {
        let Ok(link) = std::fs::read_link(&p) else {
            return p;
        };
        p = match p.parent() {
            Some(dir) if link.is_relative() => dir.join(link),
            _ => link,
        };
    }
    path.to_path_buf()
}

/// `path` as one file is known by: its folder's canonical path and its name (the file itself may
/// not exist yet).
fn identity(path: &std::path::Path) -> std::path::PathBuf {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    match path.file_name() {
        Some(name) => dir.join(name),
        None => path.to_path_buf(),
    }
}

/// Whether `path` exists and is neither a regular file nor a folder: a device, a pipe or a
/// socket, written to in place.
fn is_stream(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// `bytes` in a temporary file beside `path` (removed when dropped unpersisted).
fn stage(path: &std::path::Path, bytes: &[u8]) -> io::Result<tempfile::NamedTempFile> {
    if path.is_dir() {
        return Err(io::ErrorKind::IsADirectory.into());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no folder {}", dir.display()),
        ));
    }
    let mut builder = tempfile::Builder::new();
    builder.prefix(".vram-").suffix(".partial");
    #[cfg(unix)]
    {
        // As `fs::write` creates a file: 0o666 less the umask (tempfile's default is 0o600).
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    // tempfile's error names the temporary (`... at path "/x/.vram-Ab3.partial"`), and a
    // kind's words alone ("entity not found" for /proc) name no cause: the folder and the OS's
    // words instead.
    let mut tmp = builder.tempfile_in(dir).map_err(|e| {
        let text = e.to_string();
        let os = text.split(" at path ").next().unwrap_or(&text);
        io::Error::new(
            e.kind(),
            format!("cannot create a file in {}: {os}", dir.display()),
        )
    })?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    Ok(tmp)
}

fn write_error(path: &std::path::Path, e: io::Error) -> anyhow::Error {
    // Without the temporary file's name that tempfile adds to the OS's words.
    let text = e.to_string();
    let why = match e.raw_os_error() {
        Some(_) => text,
        // The OS's words, without tempfile's ` at path "<temporary>"`.
        None => match text.split_once(" at path ") {
            Some((os, _)) => os.to_string(),
            None => text,
        },
    };
    let msg = format!("cannot write {}: {why}", path.display());
    match e.kind() {
        io::ErrorKind::NotFound
        | io::ErrorKind::PermissionDenied
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::NotADirectory
        | io::ErrorKind::ReadOnlyFilesystem
        // The place the user chose has no room: theirs to change, as a read-only one is.
        | io::ErrorKind::StorageFull
        | io::ErrorKind::QuotaExceeded
        | io::ErrorKind::FileTooLarge => anyhow::Error::new(crate::BadInput(msg)),
        _ => anyhow::anyhow!(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_collects_both_streams_and_nests() {
        let ((inner, inner_out, _), out, err) = capture(|| {
            write!(stdout(), "outer ").unwrap();
            writeln!(stderr(), "note").unwrap();
            capture(|| {
                write!(stdout(), "inner").unwrap();
                7
            })
        });
        assert_eq!(inner, 7);
        assert_eq!(inner_out, b"inner");
        assert_eq!(out, b"outer ");
        assert_eq!(err, b"note\n");
    }
}
