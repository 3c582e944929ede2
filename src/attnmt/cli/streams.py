"""Where the commands read and write: the log (stderr), input lines, output files. Imports no
command module."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

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
