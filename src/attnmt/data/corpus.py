"""Reading parallel corpora: two line-aligned files or one TSV file.

Files may be plain UTF-8 or gzip-compressed (recognised by content, not
name). Everything a user can get wrong -- a missing file, misaligned line
counts, bad encoding, a broken archive -- raises `AttnmtError` with a message
that names the file and, where it helps, the line.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from attnmt.core.errors import AttnmtError

PathLike = Union[str, os.PathLike]

_GZIP_MAGIC = b"\x1f\x8b"
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
    """Return the lines of a UTF-8 text file (plain or gzip), without line endings.

    Lines are split on "\\n" only, so line numbers agree with `sed -n Np` even
    when a sentence contains characters such as U+2028 that
    `str.splitlines` would treat as line breaks.
    """
    return split_lines(_read_bytes(path), path)


def split_lines(data: bytes, name: PathLike) -> list[str]:
    """The lines of file contents ``data`` (plain or gzip); ``name`` appears in errors."""
    if data.startswith(_GZIP_MAGIC):
        data = _gunzip(data, name)
    text = _decode(data, name).removeprefix(_BOM)
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_bytes(path: PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise AttnmtError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise AttnmtError(f"cannot read {path}: it is a directory, expected a text file") from None
    except PermissionError:
        raise AttnmtError(f"cannot read {path}: permission denied") from None
    except OSError as err:
        raise AttnmtError(f"cannot read {path}: {err.strerror or err}") from None


def _gunzip(data: bytes, path: PathLike) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        # EOFError is what a truncated download looks like; zlib.error is bit rot.
        raise AttnmtError(f"{path}: corrupt or truncated gzip file ({err})") from None


def _decode(data: bytes, path: PathLike) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        # Translate the absolute byte offset into something the user can find in an editor.
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line_no = data.count(b"\n", 0, err.start) + 1
        column = err.start - line_start + 1
        bad = data[err.start]
        raise AttnmtError(f"{path}: line {line_no} is not valid UTF-8 (byte 0x{bad:02x} at column {column})") from None


# ---------------------------------------------------------------- corpora


def _is_blank(text: str) -> bool:
    return not text.strip()


def _empty_corpus_error(what: str) -> AttnmtError:
    return AttnmtError(f"empty corpus: {what} no sentence pairs")


def read_parallel(src_path: PathLike, tgt_path: PathLike) -> Corpus:
    """Read two line-aligned files; drop pairs where either side is blank."""
    sources = read_lines(src_path)
    targets = read_lines(tgt_path)
    if len(sources) != len(targets):
        raise AttnmtError(f"line counts differ: {src_path} has {len(sources)} lines, {tgt_path} has {len(targets)}")
    corpus = _keep_nonblank(zip(sources, targets))
    if not corpus.sources:
        raise _empty_corpus_error(f"{src_path} and {tgt_path} contain")
    return corpus


def read_tsv(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> Corpus:
    """Read source and target from two columns of a tab-separated file."""
    _check_columns(src_column, tgt_column)
    needed = max(src_column, tgt_column) + 1
    pairs = []
    for line_no, line in enumerate(read_lines(path), start=1):
        if _is_blank(line):
            pairs.append(("", ""))  # counted as dropped below, like any blank pair
            continue
        fields = line.split("\t")
        if len(fields) < needed:
            raise AttnmtError(
                f"{path}: line {line_no} has {len(fields)} tab-separated column(s), expected at least {needed}"
            )
        pairs.append((fields[src_column], fields[tgt_column]))
    corpus = _keep_nonblank(pairs)
    if not corpus.sources:
        raise _empty_corpus_error(f"{path} contains")
    return corpus


def _check_columns(src_column: object, tgt_column: object) -> None:
    for name, value in (("src_column", src_column), ("tgt_column", tgt_column)):
        # bool is an int subclass, but `src_column: true` in a config is surely a mistake.
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AttnmtError(f"{name} must be a column index >= 0, got {value!r}")
    if src_column == tgt_column:
        raise AttnmtError(f"src_column and tgt_column are both {src_column}; they must differ")


def _keep_nonblank(pairs) -> Corpus:
    sources, targets, lines, dropped = [], [], [], 0
    for line, (src, tgt) in enumerate(pairs):
        if _is_blank(src) or _is_blank(tgt):
            dropped += 1
        else:
            sources.append(src)
            targets.append(tgt)
            lines.append(line)
    return Corpus(sources, targets, dropped_empty=dropped, lines=lines)


_SPEC_FORMS = (
    'a corpus is given either as {"src": <path>, "tgt": <path>} (two line-aligned files) '
    'or as {"tsv": <path>} (one tab-separated file, optionally with "src_column" and "tgt_column")'
)


def read_corpus(spec: dict) -> Corpus:
    """Read a corpus described by a config entry (see `_SPEC_FORMS`)."""
    if not isinstance(spec, dict):
        raise AttnmtError(f"{_SPEC_FORMS}; got {spec!r}")
    keys = set(spec)
    if keys == {"src", "tgt"}:
        _check_path_values(spec, ("src", "tgt"))
        return read_parallel(spec["src"], spec["tgt"])
    if "tsv" in keys and keys <= {"tsv", "src_column", "tgt_column"}:
        _check_path_values(spec, ("tsv",))
        return read_tsv(spec["tsv"], spec.get("src_column", 0), spec.get("tgt_column", 1))
    raise AttnmtError(f"{_SPEC_FORMS}; got keys {sorted(map(str, keys))}")


def _check_path_values(spec: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if not isinstance(spec[key], (str, os.PathLike)) or not str(spec[key]):
            raise AttnmtError(f"corpus {key!r} must be a file path, got {spec[key]!r}")
