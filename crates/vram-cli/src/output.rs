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
