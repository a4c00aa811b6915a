"""Scenario files with checked-in expected traces (the etcd-raft ``datadriven`` style).

Why: a table row shows one decision; a scenario shows a story (three JournalNodes
answer, the writer decides, a committed txid is checked) and its whole trace, in
a file a reader can follow without Python. When a rule changes on purpose, the
expected traces are regenerated with ``--rewrite`` (``pytest tests/... --rewrite``)
and the diff is reviewed like code.

File format: cases separated by blank lines. A case is a command line
(``name key=value ...``), optional input lines, a ``----`` line, and the expected
output up to the next blank line. Lines starting with ``#`` before a command are
comments.
"""

from __future__ import annotations

import pathlib
import shlex
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Case:
    """One command of a scenario file."""

    line: int
    cmd: str
    args: dict[str, str]
    input: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    raw_cmd: str = ""


def parse(text: str, where: str) -> list[Case]:
    """Parse a scenario file. Raises ValueError naming the file and line of a malformed case."""
    cases: list[Case] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        comments = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
            if lines[i].startswith("#"):
                comments.append(lines[i])
            elif comments:
                comments.append("")
            i += 1
        if i >= len(lines):
            break
        start = i + 1
        words = shlex.split(lines[i])
        args = {}
        for w in words[1:]:
            k, sep, v = w.partition("=")
            args[k] = v if sep else ""
        case = Case(start, words[0], args, comments=[c for c in comments if c or comments],
                    raw_cmd=lines[i])
        i += 1
        while i < len(lines) and lines[i] != "----":
            if not lines[i].strip():
                raise ValueError(f"{where}:{start}: command {words[0]!r} has no '----' line")
            case.input.append(lines[i])
            i += 1
        if i >= len(lines):
            raise ValueError(f"{where}:{start}: command {words[0]!r} has no '----' line")
        i += 1
        while i < len(lines) and lines[i].strip():
            case.expected.append(lines[i])
            i += 1
        cases.append(case)
    return cases


def render(cases: list[Case]) -> str:
    out = []
    for c in cases:
        block = [*c.comments, c.raw_cmd, *c.input, "----", *c.expected]
        out.append("\n".join(block))
    return "\n\n".join(out) + "\n"


def run_file(path: pathlib.Path, handler: Callable[[Case], list[str]], rewrite: bool) -> None:
    """Run every case of ``path`` through ``handler``; compare, or rewrite the file.

    Raises:
        AssertionError: naming the file, line and command whose output differs.
    """
    cases = parse(path.read_text(), str(path))
    failures = []
    for c in cases:
        got = handler(c)
        if rewrite:
            c.expected = got
        elif got != c.expected:
            failures.append(f"{path.name}:{c.line}: {c.raw_cmd}\n  expected:\n    " +
                            "\n    ".join(c.expected) + "\n  got:\n    " + "\n    ".join(got))
    if rewrite:
        path.write_text(render(cases))
    assert not failures, "scenario output differs (run with --rewrite if the change is intended):\n" + \
        "\n".join(failures)
