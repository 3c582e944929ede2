"""Writing files so that a crash, a full disk or an unwritable folder never leaves half a file.

``atomic_write`` writes a temporary file beside the target, flushes it to disk and renames it over
the target: readers (and a resumed run) see the old file or the new one, never a mix. The
temporary file has a fixed name, so a write killed half-way leaves at most one stale ``.tmp`` per
target, which the next write replaces; nothing ever reads it. ``atomic_writer`` does the same for
a file written piece by piece (the links of a corpus streamed through eflomal, a TSV file written
pair by pair).
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO, TypeVar

from pydantic import ValidationError

from attnmt.core.errors import AttnmtError

T = TypeVar("T")


def atomic_write(path: Path, data: bytes):
    """Replaces ``path`` by ``data`` atomically and durably. On failure (full disk, no permission)
    the previous file is untouched, the temporary file removed, and AttnmtError names the folder."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
        os.replace(tmp, path)
        fsync_dir(path.parent)  # ... and the rename itself survives a power cut
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None


def atomic_write_text(path: Path, text: str):
    atomic_write(path, text.encode("utf-8"))


@contextmanager
def atomic_writer(path: Path) -> Iterator[TextIO]:
    """A text file (UTF-8, "\\n" line ends) to write ``path`` with piece by piece, as `atomic_write`
    writes it whole: the pieces go to a temporary file beside it, renamed over ``path`` when the
    block ends without an error, so that a file written as a stream is there whole or not at all.
    On any error the temporary file is removed and ``path`` left as it was (an OSError becomes
    AttnmtError naming the folder)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, "w", encoding="utf-8", newline="\n")
    except OSError as e:
        raise write_error(path, e) from None
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_text(path: Path, text: str):
    """Appends ``text`` (whole lines) to ``path``; AttnmtError naming the folder if that fails."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise write_error(path, e) from None


def fsync_dir(folder: Path):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(path: Path, error: OSError) -> AttnmtError:
    return AttnmtError(
        f"cannot write {Path(path).name} in {Path(path).parent}: {error.strerror or error} "
        "(full disk or unwritable folder?); files already there are unchanged"
    )


def read_checked_json(path: Path, validate: Callable[[bytes], T], what: str, advice: str) -> T:
    """``validate(the file's bytes)`` (a pydantic model's or TypeAdapter's validate_json), or
    AttnmtError naming the file and the first field at fault, then ``advice``: a file edited by hand
    is refused in one line, never half-read. ``what`` says what the file is, in "cannot read WHAT"."""
    try:
        return validate(Path(path).read_bytes())
    except OSError as e:
        raise AttnmtError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise AttnmtError(f"{path}: {where + ': ' if where else ''}{error['msg']}; {advice}") from None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks (weights files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
