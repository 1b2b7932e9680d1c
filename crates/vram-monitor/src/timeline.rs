//! The recording format of `vram record`: JSON Lines.
//!
//! One [`Sample`] per line, exactly the object `vram top --json` prints, so a
//! recording can be read with `jq`, pandas (`read_json(lines=True)`) or a
//! `for line in file` loop. JSON Lines was chosen over CSV because a sample
//! is nested (GPUs hold a varying number of processes); a CSV would need one
//! row per process and repeat the GPU columns.
//!
//! Durability: the file is opened for appending, never truncated, and each
//! line is handed to the kernel in one `write` call and flushed before the
//! next sample. Ctrl-C or a crash can therefore only lose the line being
//! written, never tear an earlier one. Should the machine die mid-write,
//! [`TimelineWriter::open`] cuts the torn tail off before appending, and
//! [`parse`] ignores an unterminated last line.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::{MonitorError, Result, Sample};

/// Appends samples to a timeline file.
#[derive(Debug)]
pub struct TimelineWriter {
    file: File,
    path: std::path::PathBuf,
    lines: u64,
}

impl TimelineWriter {
    /// Open `path` for appending, creating it if needed. A torn last line
    /// left by a crash is removed first.
    ///
    /// A file that is not empty must be a recording: its first line a sample, or (a crash
    /// during the first write) one unterminated line that starts as a sample does. Anything
    /// else (a config.json, a log named by mistake) is refused untouched: the repair cuts an
    /// unterminated last line, and a JSON file without a newline is one such line, so
    /// `vram record --out config.json` emptied the config.
    ///
    /// # Errors
    /// [`MonitorError::NotARecording`] for a file that holds something else;
    /// [`MonitorError::Io`] when the file cannot be opened or repaired.
    pub fn open(path: &Path) -> Result<Self> {
        let ctx = |what: &str| format!("{what} {}", path.display());
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| MonitorError::io(ctx("cannot open"), e))?;
        let len = file
            .metadata()
            .map_err(|e| MonitorError::io(ctx("cannot stat"), e))?
            .len();
        if len > 0 {
            check_recording(&mut file, path)?;
            // Find the last newline within the final 1 MiB (a line is far
            // shorter) and cut anything after it.
            let tail_len = len.min(1 << 20);
            let mut tail = vec![0; tail_len as usize];
            file.seek(SeekFrom::Start(len - tail_len))
                .and_then(|_| file.read_exact(&mut tail))
                .map_err(|e| MonitorError::io(ctx("cannot read"), e))?;
            if tail.last() != Some(&b'\n') {
                let repair = match tail.iter().rposition(|&b| b == b'\n') {
                    Some(i) => file.set_len(len - tail_len + i as u64 + 1),
                    None if tail_len == len => file.set_len(0),
                    // No newline in the last MiB: not ours to cut; end the
                    // line so new samples start on a line of their own.
                    None => file.write_all(b"\n"),
                };
                repair.map_err(|e| MonitorError::io(ctx("cannot repair"), e))?;
            }
        }
        Ok(TimelineWriter {
            file,
            path: path.to_path_buf(),
            lines: 0,
        })
    }

    /// Append one sample as one line, flushed.
    ///
    /// # Errors
    /// [`MonitorError::Io`] when the write fails (disk full, …).
    pub fn append(&mut self, sample: &Sample) -> Result<()> {
        let mut line = sample.to_json_line();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| {
                MonitorError::io(format!("cannot append to {}", self.path.display()), e)
            })?;
        self.lines += 1;
        Ok(())
    }

    /// Lines appended by this writer.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

/// How every line [`Sample::to_json_line`] writes begins.
const SAMPLE_START: &str = "{\"t_ms\":";

/// Refuses a file whose start is not a recording's ([`TimelineWriter::open`]).
fn check_recording(file: &mut File, path: &Path) -> Result<()> {
    let refuse = |reason: String| MonitorError::NotARecording {
        path: path.display().to_string(),
        reason,
    };
    // A line is far shorter than 1 MiB (one sample of a few GPUs and their processes).
    let mut head = Vec::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| (&mut *file).take(1 << 20).read_to_end(&mut head))
        .map_err(|e| MonitorError::io(format!("cannot read {}", path.display()), e))?;
    // Only the first line is decoded: the 1 MiB cut may fall inside a character of a later
    // sample's command line.
    match head.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let Ok(first) = std::str::from_utf8(&head[..end]) else {
                return Err(refuse("its first line is not UTF-8 text".into()));
            };
            serde_json::from_str::<Sample>(first)
                .map(|_| ())
                .map_err(|e| refuse(format!("its first line is not a sample: {e}")))
        }
        // One unterminated line: a torn first write is cut, anything else is not ours.
        None if head.starts_with(SAMPLE_START.as_bytes()) => Ok(()),
        None => Err(refuse("it holds no sample line".into())),
    }
}

/// A parsed recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The samples, in file order.
    pub samples: Vec<Sample>,
    /// True when an unterminated, unparsable last line was ignored.
    pub torn_tail: bool,
}

/// Parse JSON Lines text into samples. Blank lines are skipped; an
/// unterminated last line that does not parse is ignored (a torn write).
///
/// # Errors
/// [`MonitorError::BadRecordLine`] for any other line that is not a sample.
pub fn parse(text: &str) -> Result<Timeline> {
    let mut samples = Vec::new();
    let mut torn_tail = false;
    let terminated = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Sample>(line) {
            Ok(s) => samples.push(s),
            Err(_) if i + 1 == lines.len() && !terminated => torn_tail = true,
            Err(e) => {
                return Err(MonitorError::BadRecordLine {
                    line: i + 1,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(Timeline { samples, torn_tail })
}
