"""Where the commands read and write: the log (stderr), input lines, output files. Imports no
command module."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from attnmt.core.errors import AttnmtError

if TYPE_CHECKING:
    from attnmt.data.corpus import Line


def log(message: str):
    print(message, file=sys.stderr, flush=True)


# The bytes a line of untrusted input may have per subword token it may have (--max-tokens): a line is
# cut there before it is encoded (a 20 MB line took 1.08 GB to encode before --max-tokens cut it). A
# piece spells at most 16 characters (sentencepiece's max_piece_length) of at most 4 bytes, and the
# space before it: so the bytes kept hold at least the first max-tokens pieces of any text without
# long runs of spaces or of characters that normalization removes.
LINE_BYTES_PER_TOKEN = 100


def input_lines(path: str | None, max_bytes: int | None = None) -> Iterator[Line]:
    """The lines of --input, a file (plain or gzip) or stdin (None or "-"), read as a stream, each cut
    to ``max_bytes`` (attnmt.data.corpus.bounded_lines: the reader of corpora too)."""
    from attnmt.data.corpus import bounded_lines

    if path is None or path == "-":
        return bounded_lines(sys.stdin.buffer, "<stdin>", max_bytes)
    return bounded_lines(path, path, max_bytes)


def read_input(path: str | None) -> list[str]:
    """Every line of --input (input_lines), kept."""
    return [line.text for line in input_lines(path)]


def read_line_pairs(first: str, second: str) -> tuple[list[str], list[str]]:
    """Two files read line by line, which must have as many lines (empty ones included)."""
    from attnmt.data.corpus import read_lines

    a, b = read_lines(first), read_lines(second)
    if len(a) != len(b):
        raise AttnmtError(f"line counts differ: {first} has {len(a)} lines, {second} has {len(b)}")
    return a, b


def lines_together(files: list[tuple[str, Iterable[str]]], note: str = "") -> Iterator[tuple[int, list[str]]]:
    """The lines of line-aligned files (name, its lines) read together as streams: the number of
    each line (from 1) and that line of every file. AttnmtError where a file ends before another,
    naming the one that ends first and its last line, with every file's line count (the rest of a
    longer file is read past to count it, not kept); ``note`` ends its message."""
    names, iterators = [name for name, _ in files], [iter(lines) for _, lines in files]
    for number in itertools.count(1):
        lines = [next(iterator, None) for iterator in iterators]
        if all(line is None for line in lines):
            return
        if None in lines:
            counts = [
                number - 1 if line is None else number + sum(1 for _ in rest) for line, rest in zip(lines, iterators)
            ]
            has = ", ".join(
                f"{name} has {count}{' lines' if i == 0 else ''}" for i, (name, count) in enumerate(zip(names, counts))
            )
            ended = names[lines.index(None)]
            where = f"after line {number - 1}" if number > 1 else "it is empty"
            raise AttnmtError(f"line counts differ: {has}; {ended} ends first ({where}){note}")
        yield number, lines


_PAIR = re.compile(r"\bpair (\d+)\b")


def renumbered(message: str, first: int) -> tuple[str, bool]:
    """An error message about "pair N" of pairs given together (a chunk of a file's lines, the
    first of which is line ``first``) with N the line's number, and whether it names a pair."""
    message, found = _PAIR.subn(lambda match: f"pair {first + int(match[1]) - 1}", message)
    return message, found > 0


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


class LazyOutput:
    """An output file (or stdout: None or "-") written a chunk of lines at a time, as translate's
    Written writes its own: opened when the first lines are written, so that an error before them
    leaves a file of that name as it was, and flushed after each chunk, so that what is done can be
    read while the rest is computed. A run that ends without lines and without an error leaves an
    empty file. ``lines``: how many have been written."""

    def __init__(self, path: str | None):
        self.path, self.stream, self.lines = path, None, 0

    def __enter__(self) -> LazyOutput:
        return self

    def __exit__(self, error_type, *exc):
        if self.stream is None and error_type is None:
            self.stream = open_output(self.path)
        close_output(self.stream)

    def write(self, lines: list[str]):
        if self.stream is None:
            self.stream = open_output(self.path)
        self.stream.writelines(line + "\n" for line in lines)
        self.stream.flush()
        self.lines += len(lines)


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
