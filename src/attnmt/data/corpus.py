"""Reading parallel corpora: two line-aligned files or one TSV file, line by line.

Files may be plain UTF-8 or gzip-compressed (recognised by content, not
name). They are read one line at a time (`stream_lines`, `CorpusPairs`), so a
corpus of any size is read in bounded memory; `read_corpus` and `read_lines`
keep what they read for the small files that need their texts (dev and test
sets). Everything a user can get wrong -- a missing file, misaligned line
counts, bad encoding, a broken archive -- raises `AttnmtError` with a message
that names the file and, where it helps, the line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import zip_longest
from typing import BinaryIO, Iterable, Iterator, Union

from attnmt.core.errors import AttnmtError

PathLike = Union[str, os.PathLike]

_GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 1 << 20  # what stream_lines reads at a time
_BOM = "\ufeff"


@dataclass
class Corpus:
    """Aligned sentence pairs plus how many pairs were dropped, and why."""

    sources: list[str]
    targets: list[str]
    dropped_empty: int = 0  # pairs dropped because a side was empty/whitespace
    # The line (0-based) of each pair in its files: what a file of one line per corpus line (word
    # alignments, attnmt.translation.guided_alignment) is matched by. None where not known.
    lines: list[int] | None = None


# ---------------------------------------------------------------- reading lines


def read_lines(path: PathLike) -> list[str]:
    """Return the lines of a UTF-8 text file (plain or gzip), without line endings (see
    `stream_lines`)."""
    return list(stream_lines(path))


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """``items`` as lists of ``size`` (the last one shorter), read as they come: a stream of pairs
    worked on a chunk at a time. (itertools.batched, from Python 3.12.)"""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def stream_lines(path: PathLike) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain or gzip), one at a time, without line endings.

    Lines are split on "\\n" only, so line numbers agree with `sed -n Np` even
    when a sentence contains characters such as U+2028 that
    `str.splitlines` would treat as line breaks.
    """
    with _open(path) as raw:
        stream, compressed = _decompressed(raw)
        with _read_errors(path, compressed):
            yield from _block_lines(stream, path)


def _block_lines(stream: BinaryIO, name: PathLike) -> Iterator[str]:
    """The lines of ``stream``, read BLOCK_BYTES at a time and each block's whole lines decoded and
    split at once: a corpus's reader does a few operations a block rather than a dozen a line
    (`_lines_of`, a line at a time, is for the streams that must not wait for a block: stdin).
    The same lines as `_lines_of`: a final newline ends the last line, one "\\r" before a line's
    end is dropped, a byte-order mark at the start of the file too."""
    before = 0  # lines yielded so far
    pieces: list[bytes] = []  # the bytes read since the last newline
    while block := stream.read(BLOCK_BYTES):
        end = block.rfind(b"\n")
        if end < 0:  # (a line longer than a block: joined once it ends)
            pieces.append(block)
            continue
        whole = b"".join([*pieces, block[:end]])
        pieces = [block[end + 1 :]]
        lines = _decoded_lines(whole, name, before)
        before += len(lines)
        yield from lines
    last = b"".join(pieces)
    if last:
        yield from _decoded_lines(last, name, before)


def _decoded_lines(data: bytes, name: PathLike, before: int) -> list[str]:
    """The lines of ``data`` (whole lines, the last without its newline), the lines ``before`` it
    being the file's first ones."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # the line, and the column in it, where the user can find them
        for number, line in enumerate(data.split(b"\n"), start=before + 1):
            _decode(line, name, number)
        raise
    lines = text.split("\n")
    if before == 0:
        lines[0] = lines[0].removeprefix(_BOM)
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


@dataclass(frozen=True)
class Line:
    """A line as `bounded_lines` reads it: its text, and whether it was cut (``cut``: it held more
    than the bound's bytes, and ``text`` is their first whole characters)."""

    text: str
    cut: bool = False


def bounded_lines(source: PathLike | BinaryIO, name: PathLike, max_bytes: int | None) -> Iterator[Line]:
    """The lines of a file (a path) or of an open binary stream (stdin: it need not be seekable), as
    `stream_lines` reads them, each cut to its first ``max_bytes`` bytes (None: not cut) before it
    is decoded: the rest of a longer line is read past, never held, so that a line of any length,
    or a small gzip file of a huge one, costs at most ``max_bytes`` of memory. ``name`` appears in
    errors."""
    if isinstance(source, (str, os.PathLike)):
        with _open(source) as raw:
            yield from _lines_of(raw, name, max_bytes)
    else:
        yield from _lines_of(source, name, max_bytes)


def split_lines(data: bytes, name: PathLike) -> list[str]:
    """The lines of file contents ``data`` (plain or gzip); ``name`` appears in errors."""
    return [line.text for line in _lines_of(io.BytesIO(data), name)]


def _open(path: PathLike) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise AttnmtError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise AttnmtError(f"cannot read {path}: it is a directory, expected a text file") from None
    except PermissionError:
        raise AttnmtError(f"cannot read {path}: permission denied") from None
    except OSError as err:
        raise AttnmtError(f"cannot read {path}: {err.strerror or err}") from None


def _decompressed(raw: BinaryIO) -> tuple[BinaryIO, bool]:
    """``raw``, gunzipped as it is read if it starts as gzip does; and whether it does."""
    if raw.seekable():
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
    else:  # a pipe: looked at, not read (its first bytes arrive in one piece, as a gzip header is written)
        compressed = raw.peek(2)[:2] == _GZIP_MAGIC
    return (gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw), compressed


@contextmanager
def _read_errors(name: PathLike, compressed: bool):
    """A failing read of file ``name`` as an AttnmtError that names it."""
    try:
        yield
    except (OSError, EOFError, zlib.error) as err:
        if not compressed:
            raise AttnmtError(f"cannot read {name}: {getattr(err, 'strerror', None) or err}") from None
        # EOFError is what a truncated download looks like; zlib.error is bit rot.
        raise AttnmtError(f"{name}: corrupt or truncated gzip file ({err})") from None


def _lines_of(raw: BinaryIO, name: PathLike, max_bytes: int | None = None) -> Iterator[Line]:
    """The decoded lines of the open binary file ``raw``, gunzipped (as a stream) if it starts as gzip
    does, a line at a time; each cut to ``max_bytes`` if given (`bounded_lines`). (Splitting the bytes
    on b"\\n" cuts no character: no byte of a multi-byte UTF-8 character is 0x0a.)"""
    stream, compressed = _decompressed(raw)
    limit = None if max_bytes is None else max_bytes + 1  # (+ 1: its newline)
    lines = stream if limit is None else iter(lambda: stream.readline(limit), b"")
    with _read_errors(name, compressed):
        for number, line in enumerate(lines, start=1):
            cut = limit is not None and len(line) == limit and not line.endswith(b"\n")
            if cut:  # the rest of the line, read past a piece at a time
                while (rest := stream.readline(limit)) and not rest.endswith(b"\n"):
                    pass
                line = line[:max_bytes]
            text = _decode(line, name, number, cut)
            if number == 1:
                text = text.removeprefix(_BOM)
            if text.endswith("\n"):
                text = text[:-1]  # the final newline ends the last line; it does not start a new one
            yield Line(text[:-1] if text.endswith("\r") else text, cut)


def _decode(line: bytes, name: PathLike, number: int, cut: bool = False) -> str:
    """``line`` as UTF-8; of a line ``cut``, its whole characters (the last may have been cut in two)."""
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(line, final=False) if cut else line.decode("utf-8")
    except UnicodeDecodeError as err:  # where the user can find it in an editor
        bad = line[err.start]
        raise AttnmtError(
            f"{name}: line {number} is not valid UTF-8 (byte 0x{bad:02x} at column {err.start + 1})"
        ) from None


# ---------------------------------------------------------------- corpora


def _is_blank(text: str) -> bool:
    return not text.strip()


def _empty_corpus_error(what: str) -> AttnmtError:
    return AttnmtError(f"empty corpus: {what} no sentence pairs")


_SPEC_FORMS = (
    'a corpus is given either as {"src": <path>, "tgt": <path>} (two line-aligned files) '
    'or as {"tsv": <path>} (one tab-separated file, optionally with "src_column" and "tgt_column")'
)


class CorpusPairs:
    """The sentence pairs of a corpus described by a config entry (see `_SPEC_FORMS`), read line
    by line: iterating yields ``(line, source, target)`` for each pair with two non-blank sides,
    ``line`` counting the files' lines from 0; the others are counted in ``dropped_empty`` as they
    pass. Each iteration reads the files again."""

    def __init__(self, spec: dict):
        if not isinstance(spec, dict):
            raise AttnmtError(f"{_SPEC_FORMS}; got {spec!r}")
        keys = set(spec)
        if keys == {"src", "tgt"}:
            _check_path_values(spec, ("src", "tgt"))
            self.files = (spec["src"], spec["tgt"])
            self.empty_message = f"{spec['src']} and {spec['tgt']} contain"
        elif "tsv" in keys and keys <= {"tsv", "src_column", "tgt_column"}:
            _check_path_values(spec, ("tsv",))
            self.columns = (spec.get("src_column", 0), spec.get("tgt_column", 1))
            _check_columns(*self.columns)
            self.files = (spec["tsv"],)
            self.empty_message = f"{spec['tsv']} contains"
        else:
            raise AttnmtError(f"{_SPEC_FORMS}; got keys {sorted(map(str, keys))}")
        self.dropped_empty = 0

    def __iter__(self) -> Iterator[tuple[int, str, str]]:
        self.dropped_empty = 0
        for line, (src, tgt) in enumerate(self._sides()):
            if _is_blank(src) or _is_blank(tgt):
                self.dropped_empty += 1
            else:
                yield line, src, tgt

    def _sides(self) -> Iterator[tuple[str, str]]:
        if len(self.files) == 2:
            return _aligned_lines(*self.files)
        return _tsv_columns(self.files[0], *self.columns)

    def empty_error(self) -> AttnmtError:
        return _empty_corpus_error(self.empty_message)


def _aligned_lines(src_path: PathLike, tgt_path: PathLike) -> Iterator[tuple[str, str]]:
    """The lines of two files side by side; AttnmtError at the end if one has more lines."""
    src_lines = tgt_lines = 0
    for src, tgt in zip_longest(stream_lines(src_path), stream_lines(tgt_path)):
        src_lines += src is not None
        tgt_lines += tgt is not None
        if src_lines == tgt_lines:
            yield src, tgt
    if src_lines != tgt_lines:  # (the longer file read to its end, to say how long each is)
        raise AttnmtError(f"line counts differ: {src_path} has {src_lines} lines, {tgt_path} has {tgt_lines}")


def _tsv_columns(path: PathLike, src_column: int, tgt_column: int) -> Iterator[tuple[str, str]]:
    needed = max(src_column, tgt_column) + 1
    for line_no, line in enumerate(stream_lines(path), start=1):
        if _is_blank(line):
            yield "", ""  # counted as dropped, like any blank pair
            continue
        fields = line.split("\t")
        if len(fields) < needed:
            raise AttnmtError(
                f"{path}: line {line_no} has {len(fields)} tab-separated column(s), expected at least {needed}"
            )
        yield fields[src_column], fields[tgt_column]


def _check_columns(src_column: object, tgt_column: object) -> None:
    for name, value in (("src_column", src_column), ("tgt_column", tgt_column)):
        # bool is an int subclass, but `src_column: true` in a config is surely a mistake.
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AttnmtError(f"{name} must be a column index >= 0, got {value!r}")
    if src_column == tgt_column:
        raise AttnmtError(f"src_column and tgt_column are both {src_column}; they must differ")


def _check_path_values(spec: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if not isinstance(spec[key], (str, os.PathLike)) or not str(spec[key]):
            raise AttnmtError(f"corpus {key!r} must be a file path, got {spec[key]!r}")


def read_corpus(spec: dict) -> Corpus:
    """Read a corpus described by a config entry (see `_SPEC_FORMS`) whole: for the files whose
    texts are kept (dev and test sets); a training corpus is read as `CorpusPairs`."""
    pairs = CorpusPairs(spec)
    lines, sources, targets = [], [], []
    for line, src, tgt in pairs:
        lines.append(line)
        sources.append(src)
        targets.append(tgt)
    if not sources:
        raise pairs.empty_error()
    return Corpus(sources, targets, dropped_empty=pairs.dropped_empty, lines=lines)


def read_parallel(src_path: PathLike, tgt_path: PathLike) -> Corpus:
    """Read two line-aligned files; drop pairs where either side is blank."""
    return read_corpus({"src": src_path, "tgt": tgt_path})


def read_tsv(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> Corpus:
    """Read source and target from two columns of a tab-separated file."""
    return read_corpus({"tsv": path, "src_column": src_column, "tgt_column": tgt_column})
