"""Every Python example in README.md runs, and prints what the README shows (doctest-style).

A ```python block followed (only blank lines between) by a ```text block is run with the
installed vramkit, and its standard output must be that text: a line `...` stands for any number
of lines, `[..]` inside a line for the rest of that line. A block preceded by
`<!-- readme-test: setup CODE -->` runs CODE first (names the example leaves to the reader); one
preceded by `<!-- readme-test: requires MODULE -->` skips, saying so, where MODULE does not import
(torch, in the venv without it); one preceded by `<!-- readme-test: skip REASON -->` is reported
as a skip with that reason.

After a change that moves an example on purpose, rewrite the text blocks with
`VRAMKIT_README=overwrite bash .ci/python-tests` and read the diff (elided blocks that still
match are kept). The CLI examples are checked by crates/vram-cli/tests/readme.rs.
"""

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!-- readme-test: (setup|skip|requires) (.*) -->$")


def examples(text: str):
    """(line, code, expected, expected's (start, end) line span, mark) for each python block."""
    lines = text.split("\n")
    blocks, i, mark = [], 0, None
    while i < len(lines):
        m = MARK.match(lines[i])
        if m:
            mark = (m.group(1), m.group(2))
        f = FENCE.match(lines[i])
        if not f:
            i += 1
            continue
        lang, start = f.group(1), i + 1
        end = start
        while not lines[end].startswith("```"):
            end += 1
        blocks.append((lang, start, end, mark))
        mark = None
        i = end + 1
    out = []
    for k, (lang, start, end, mark) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text":
            nlang, nstart, nend, _ = blocks[k + 1]
            if all(not l.strip() for l in lines[end + 1 : nstart - 1]):
                expected = (nstart, nend)
        out.append((start, "\n".join(lines[start:end]), expected, mark))
    return out


def matches(expected: list, actual: list) -> bool:
    """`...` lines match any run of lines; `[..]` matches the rest of a line."""
    if not expected:
        return not actual
    e = expected[0]
    if e == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    if not actual:
        return False
    a = actual[0]
    ok = a.startswith(e[: e.index("[..]")]) if "[..]" in e else a == e
    return ok and matches(expected[1:], actual[1:])


TEXT = README.read_text()
EXAMPLES = examples(TEXT)


def test_readme_has_python_examples_with_output():
    assert len(EXAMPLES) >= 3
    assert sum(1 for e in EXAMPLES if e[2] is not None) >= 1


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"README.md:{e[0]}")
def test_readme_python_example(example, monkeypatch, tmp_path):
    line, code, expected, mark = example
    if mark and mark[0] == "skip":
        pytest.skip(f"README.md:{line}: {mark[1]}")
    if mark and mark[0] == "requires":
        pytest.importorskip(mark[1], reason=f"README.md:{line} needs {mark[1]}")
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__readme__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if mark and mark[0] == "setup":
            exec(compile(mark[1], f"README.md:{line - 1} (setup)", "exec"), ns)
        exec(compile(code, f"README.md:{line}", "exec"), ns)
    if expected is None:
        return
    start, end = expected
    lines = TEXT.split("\n")
    want = lines[start:end]
    got = out.getvalue().rstrip("\n").split("\n")
    if matches(want, got):
        return
    if os.environ.get("VRAMKIT_README") == "overwrite":
        # Earlier rewrites may have moved the block: find it again by its code.
        cur = README.read_text()
        start, end = next(e[2] for e in examples(cur) if e[1] == code)
        lines = cur.split("\n")
        README.write_text("\n".join(lines[:start] + got + lines[end:]))
        pytest.skip(f"README.md:{start + 1}: rewrote the example's output (VRAMKIT_README=overwrite)")
    diff = "\n".join(f"- {l}" for l in want) + "\n" + "\n".join(f"+ {l}" for l in got)
    pytest.fail(f"README.md:{start + 1}: the example prints something else:\n{diff}")
