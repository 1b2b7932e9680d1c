//! `vramkit._vramkit`: the Python extension behind the `vramkit` package.
//!
//! A thin binding. The commands run in-process through [`vram_cli::run_captured`], the same
//! code as the `vram` binary, so Python gets the same JSON and the same one-line errors. This
//! crate only converts: argument lists in, text out, a non-zero exit code into
//! `vramkit.VramError` (a `ValueError`) carrying the CLI's message. The GIL is released while a
//! command runs, and a panic is caught and raised as `VramError`, never unwinding into the
//! interpreter. Everything Python-shaped (keyword arguments, result objects, the training-loop
//! helpers) lives in the pure-Python package `python/vramkit`.
#![forbid(unsafe_code)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    vramkit,
    VramError,
    PyValueError,
    "Bad input to vramkit (or an internal failure), with the `vram` command's one-line message."
);

/// The text of a caught panic.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// The one-line message of a failed command: the last line it wrote to standard error,
/// without the `vram: ` prefix.
fn error_message(stderr: &str, code: u8) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.strip_prefix("vram: ").unwrap_or(l).to_string())
        .unwrap_or_else(|| format!("vram exited with code {code}"))
}

/// Runs `f` without the GIL, turning a panic into `VramError`.
fn guarded<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> PyResult<R> {
    py.detach(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|p| {
            VramError::new_err(format!(
                "internal error (a bug in vramkit, please report it): {}",
                panic_text(&*p)
            ))
        })
}

/// Runs one `vram` command (arguments without the program name) and returns
/// `(stdout, stderr)`; raises `VramError` with the command's one-line message when it fails.
#[pyfunction]
fn run(py: Python<'_>, args: Vec<String>) -> PyResult<(String, String)> {
    let done = guarded(py, move || vram_cli::run_captured(args))?;
    let out = String::from_utf8_lossy(&done.stdout).into_owned();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    if done.code != 0 {
        return Err(VramError::new_err(error_message(&err, done.code)));
    }
    Ok((out, err))
}

/// Runs `vram` with the process's own standard output and error (the arguments include the
/// program name) and returns its exit code: `python -m vramkit`.
#[pyfunction]
fn main(py: Python<'_>, args: Vec<String>) -> PyResult<u8> {
    guarded(py, move || vram_cli::main_from(args))
}

/// Panics inside the guarded path; for the test that a panic raises `VramError` and leaves
/// the interpreter running.
#[pyfunction]
fn _panic_for_test(py: Python<'_>, message: String) -> PyResult<()> {
    guarded(py, move || -> () { panic!("{message}") })
}

/// The extension module.
#[pymodule]
fn _vramkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VramError", m.py().get_type::<VramError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    Ok(())
}
