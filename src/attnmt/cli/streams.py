"""Where the commands read and write: the log (stderr), input lines, output files. Imports no
command module."""

from __future__ import annotations

import sys
from pathlib import Path

from attnmt.core.errors import AttnmtError


def log(message: str):
    print(message, file=sys.stderr, flush=True)


def read_input(path: str | None) -> list[str]:
    from attnmt.data.corpus import read_lines, split_lines

    if path is None or path == "-":
        return split_lines(sys.stdin.buffer.read(), "<stdin>")
    return read_lines(path)


def read_line_pairs(first: str, second: str) -> tuple[list[str], list[str]]:
    """Two files read line by line, which must have as many lines (empty ones included)."""
    from attnmt.data.corpus import read_lines

    a, b = read_lines(first), read_lines(second)
    if len(a) != len(b):
        raise AttnmtError(f"line counts differ: {first} has {len(a)} lines, {second} has {len(b)}")
    return a, b


def open_output(path: str | None):
    if path is None or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None


def close_output(stream):
    """Closes what open_output opened (not stdout)."""
    if stream is not None and stream is not sys.stdout:
        stream.close()


def write_lines(path: str | None, lines):
    """Lines to a file (or stdout: None or -), each ended by a newline."""
    out = open_output(path)
    try:
        out.writelines(line + "\n" for line in lines)
    finally:
        close_output(out)


def write_text(path: str, text: str):
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None
