//! Reading standard input: a one-line prompt on the terminal, silence on a pipe or file.
//!
//! `vram doctor` without a message and `vram batch --lengths -` read standard input to its
//! end. Typed at a terminal, that read waits with nothing on screen; the prompt says what
//! to paste and how to end it. A pipe or a file gets no prompt, so stderr stays clean for
//! scripts.

use std::io::IsTerminal;

/// The key that ends terminal input on this platform.
const END_KEYS: &str = if cfg!(windows) {
    "Ctrl-Z then Enter"
} else {
    "Ctrl-D"
};

/// The prompt for reading `what` from standard input, or none when it is not a terminal.
pub(crate) fn prompt(is_terminal: bool, what: &str) -> Option<String> {
    is_terminal.then(|| format!("vram: paste {what}, then press {END_KEYS} on a new line to end"))
}

/// Prints the prompt for `what` to stderr when standard input is a terminal.
pub(crate) fn prompt_if_terminal(what: &str) {
    if let Some(line) = prompt(std::io::stdin().is_terminal(), what) {
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_gets_one_line_naming_the_input_and_the_end_key() {
        let line = prompt(true, "the out-of-memory message or log").unwrap();
        assert!(
            line.contains("paste the out-of-memory message or log"),
            "{line}"
        );
        assert!(line.contains(END_KEYS), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn a_pipe_or_file_gets_no_prompt() {
        assert_eq!(prompt(false, "the lengths"), None);
    }
}
