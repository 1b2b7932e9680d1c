//! The `vram` binary: [`vram_cli::main_from`] on the process's arguments.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(vram_cli::main_from(std::env::args_os()))
}
