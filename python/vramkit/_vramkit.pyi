"""Typing of the compiled extension ``vramkit._vramkit`` (crates/vram-py)."""

__version__: str

class VramError(ValueError):
    """Bad input to vramkit (or an internal failure), with the ``vram`` command's one-line
    message."""

def run(args: list[str]) -> tuple[str, str]:
    """Runs one ``vram`` command in-process (arguments without the program name) and returns
    ``(stdout, stderr)``; raises :class:`VramError` with its one-line message on failure."""

def main(args: list[str]) -> int:
    """Runs ``vram`` on the process's own output streams (``args[0]`` is the program name);
    returns the exit code."""

def _panic_for_test(message: str) -> None:
    """Panics inside the guarded path (raises :class:`VramError`); for tests."""
