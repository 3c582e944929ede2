"""The prepared store: the encoded pairs of the training corpora as numpy arrays on disk, read
through memory maps, so that training holds no corpus in memory whatever its size.

    EXPERIMENT/store/manifest.json       what the store was made from and what it holds (JSON,
                                         written last: a store without it is no store)
    EXPERIMENT/store/PART/NNNNN.src.npy  a shard's source pieces, one flat array (uint16 where the
                                         vocabulary fits, else uint32)
    EXPERIMENT/store/PART/NNNNN.tgt.npy  its target pieces
    EXPERIMENT/store/PART/NNNNN.pairs.npy  one row a pair (PAIR_ROW): its line in the corpus files
                                         (from 0), where its pieces start in the flat arrays, how many

A part is one corpus (``train``, ``extra-1``, ...); its shards hold about SHARD_TOKENS pieces a
side each, which is all a prepare holds in memory. The store is written into ``store.partial``
and renamed to ``store`` once complete, so a prepare that fails or is killed leaves no half store
(the next one removes what a killed one left). The manifest records each input file's size,
modification time and SHA-256 and the settings the caller gives (subword models, filters, ...):
`stale_reason` says whether a store can be reused, and `PairStore` checks every shard file's size
and SHA-256 against the manifest before mapping it, so a truncated or edited store is an error
naming the file, never pieces read from garbage.

Why numpy's .npy files: a flat array with a short header (dtype, shape) that `np.load(mmap_mode="r")`
maps without copying, written by `np.save`, read by any numpy, no pickle (`allow_pickle=False`);
numpy is already a dependency. Apache Arrow would add pyarrow (a large package) for the same
flat buffers; a format of our own would need its own reader and checks.
"""

from __future__ import annotations

import json
import os
import shutil
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Iterator, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, file_sha256, fsync_dir, read_checked_json, write_error

FOLDER = "store"
MANIFEST = "manifest.json"
FORMAT = 1
SHARD_TOKENS = 1 << 21  # pieces a side in a shard (4 MB of uint16): about what a prepare holds in memory
# One row a pair of a shard: its line in the corpus files, and where its pieces are in the shard's arrays
PAIR_ROW = np.dtype(
    [("line", "<i8"), ("src_start", "<i8"), ("tgt_start", "<i8"), ("src_length", "<i4"), ("tgt_length", "<i4")]
)
KINDS = ("src", "tgt", "pairs")
PASS_ROWS = 4096  # rows of a shard read at a time by StoredPart.pairs

REBUILD = "delete the folder to prepare it again ('attnmt prepare')"


def token_dtype(vocabulary_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every piece id."""
    return np.dtype(np.uint16 if vocabulary_size <= 1 << 16 else np.uint32)


# ---------------------------------------------------------------- the manifest


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class InputFile(_Record):
    """A file the store was made from, as it was."""

    path: str
    size: int
    mtime_ns: int
    sha256: str


class ShardFile(_Record):
    """A file of the store as written. Like an input, a file whose size and modification time
    are those recorded is taken as unchanged (hashing 4 GB of store at every start took seconds);
    any other is read for its SHA-256. Stores written before the time was recorded: always read."""

    size: int
    sha256: str
    mtime_ns: int | None = None


class Shard(_Record):
    pairs: int
    src_tokens: int
    tgt_tokens: int
    files: dict[Literal["src", "tgt", "pairs"], ShardFile]


class Part(_Record):
    name: str
    pairs: int
    counts: dict[str, int]  # what the caller counted while preparing it (pairs read, dropped by each filter)
    shards: list[Shard]


class Manifest(_Record):
    format: int
    token_dtype: Literal["uint16", "uint32"]
    inputs: list[InputFile]
    settings: dict[str, Any]
    parts: list[Part]


def input_file(path: Path) -> InputFile:
    """``path``'s size, modification time and SHA-256 (read in chunks)."""
    stat = _stat(path)
    return InputFile(path=str(path), size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=file_sha256(path))


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as e:
        raise AttnmtError(f"cannot read {path}: {e.strerror or e}") from None


def normalized(settings: dict) -> dict:
    """``settings`` as the manifest reads them back (JSON: tuples become lists, keys and paths strings)."""
    return json.loads(json.dumps(settings, default=str))


def read_manifest(folder: Path) -> Manifest:
    return read_checked_json(folder / MANIFEST, Manifest.model_validate_json, "the store's manifest", REBUILD)


def stale_reason(folder: Path, inputs: list[Path], settings: dict) -> str | None:
    """None if the store in ``folder`` was made from the files ``inputs`` as they are now and with
    ``settings``; else why it must be prepared (again): "no store" if there is none. A file whose
    size and modification time are those recorded is taken as unchanged; one whose time alone
    changed (copied, touched) is read for its SHA-256, and the manifest updated if it is the same."""
    if not (folder / MANIFEST).is_file():
        return "no store"
    manifest = read_manifest(folder)
    if manifest.format != FORMAT:
        return f"{folder} is a store of another format ({manifest.format})"
    settings = normalized(settings)
    if manifest.settings != settings:
        changed = sorted(k for k in {**manifest.settings, **settings} if manifest.settings.get(k) != settings.get(k))
        return f"{folder} was prepared with other {', '.join(changed)}"
    if [Path(f.path) for f in manifest.inputs] != [Path(p) for p in inputs]:
        return f"{folder} was prepared from other files ({', '.join(f.path for f in manifest.inputs)})"
    touched = False
    for recorded in manifest.inputs:
        stat = _stat(Path(recorded.path))
        if (stat.st_size, stat.st_mtime_ns) == (recorded.size, recorded.mtime_ns):
            continue
        if stat.st_size != recorded.size or file_sha256(Path(recorded.path)) != recorded.sha256:
            return f"{recorded.path} changed since {folder} was prepared"
        recorded.mtime_ns, touched = stat.st_mtime_ns, True
    if touched:  # (same bytes, a new time: not read again next time)
        atomic_write_text(folder / MANIFEST, manifest.model_dump_json() + "\n")
    return None


# ---------------------------------------------------------------- writing


@dataclass
class EncodedChunk:
    """Consecutive pairs of a corpus, encoded and filtered: their lines, and the pieces of each
    side as one flat array with each pair's length; ``counts``: what was counted on the way."""

    lines: np.ndarray  # (n,) int64
    src: np.ndarray  # flat pieces
    src_lengths: np.ndarray  # (n,) int32
    tgt: np.ndarray
    tgt_lengths: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: list[int], src_ids: list[list[int]], tgt_ids: list[list[int]], dtype: np.dtype, counts=None):
        def flat(ids):
            return np.fromiter(chain.from_iterable(ids), dtype=dtype), np.array([len(s) for s in ids], np.int32)

        (src, src_lengths), (tgt, tgt_lengths) = flat(src_ids), flat(tgt_ids)
        return cls(np.array(lines, np.int64), src, src_lengths, tgt, tgt_lengths, dict(counts or {}))


class StoreWriter:
    """Writes a store into FOLDER.partial, part after part, and renames it to FOLDER in
    ``finish``. Used as a context manager: if anything fails before ``finish``, the partial
    folder is removed (a prepare killed outright leaves it, and the next writer removes it)."""

    def __init__(self, folder: Path, dtype: np.dtype):
        self.folder, self.dtype = Path(folder), np.dtype(dtype)
        self.partial = self.folder.with_name(self.folder.name + ".partial")
        self.parts: list[Part] = []
        self._buffer: list[EncodedChunk] = []

    def __enter__(self) -> StoreWriter:
        shutil.rmtree(self.partial, ignore_errors=True)
        try:
            self.partial.mkdir(parents=True)
        except OSError as e:
            raise write_error(self.partial / MANIFEST, e) from None
        return self

    def __exit__(self, kind, error, traceback):
        shutil.rmtree(self.partial, ignore_errors=True)  # (after finish, already renamed)

    def start_part(self, name: str):
        self._flush()
        self.parts.append(Part(name=name, pairs=0, counts={}, shards=[]))
        (self.partial / name).mkdir()

    def count(self, counts: dict[str, int]):
        """``counts`` added to the current part's (what the caller counts: pairs read, dropped ...)."""
        part = self.parts[-1]
        for key, value in counts.items():
            part.counts[key] = part.counts.get(key, 0) + value

    def add(self, chunk: EncodedChunk):
        """The chunk's pairs at the end of the current part, its counts added to the part's."""
        self.count(chunk.counts)
        if len(chunk.lines):
            self._buffer.append(chunk)
        if (
            sum(len(c.src) for c in self._buffer) >= SHARD_TOKENS
            or sum(len(c.tgt) for c in self._buffer) >= SHARD_TOKENS
        ):
            self._flush()

    def _flush(self):
        if not self._buffer:
            return
        chunks, self._buffer = self._buffer, []
        part = self.parts[-1]
        arrays = {side: np.concatenate([getattr(c, side) for c in chunks]) for side in ("src", "tgt")}
        rows = np.zeros(sum(len(c.lines) for c in chunks), PAIR_ROW)
        rows["line"] = np.concatenate([c.lines for c in chunks])
        for side in ("src", "tgt"):
            lengths = np.concatenate([getattr(c, f"{side}_lengths") for c in chunks])
            rows[f"{side}_length"] = lengths
            rows[f"{side}_start"] = np.cumsum(lengths) - lengths
        arrays["pairs"] = rows
        files = {}
        for kind, array in arrays.items():
            path = self.partial / part.name / f"{len(part.shards):05d}.{kind}.npy"
            size = _save(path, array)  # (renamed with its folder at the end: the time stays)
            files[kind] = ShardFile(size=size, sha256=file_sha256(path), mtime_ns=_stat(path).st_mtime_ns)
        part.shards.append(
            Shard(pairs=len(rows), src_tokens=len(arrays["src"]), tgt_tokens=len(arrays["tgt"]), files=files)
        )
        part.pairs += len(rows)

    def finish(self, inputs: list[InputFile], settings: dict):
        """The manifest written, then the partial folder renamed to the store's (an older store
        replaced)."""
        self._flush()
        manifest = Manifest(
            format=FORMAT, token_dtype=self.dtype.name, inputs=inputs, settings=normalized(settings), parts=self.parts
        )
        atomic_write_text(self.partial / MANIFEST, manifest.model_dump_json() + "\n")
        old = self.folder.with_name(self.folder.name + ".old")
        try:
            shutil.rmtree(old, ignore_errors=True)
            if self.folder.exists():
                os.replace(self.folder, old)
            os.replace(self.partial, self.folder)
            fsync_dir(self.folder.parent)
        except OSError as e:
            raise write_error(self.folder / MANIFEST, e) from None
        shutil.rmtree(old, ignore_errors=True)


def _save(path: Path, array: np.ndarray) -> int:
    """``array`` into ``path`` as .npy, on disk before the store is renamed; its size in bytes."""
    try:
        with open(path, "wb") as f:
            np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
            return f.tell()
    except OSError as e:
        raise write_error(path, e) from None


# ---------------------------------------------------------------- reading


class StoredPart:
    """One part of a store, its shards mapped: pair ``i``'s pieces and line, every pair's lengths."""

    def __init__(self, folder: Path, part: Part, dtype: np.dtype, check: bool):
        self.name, self.counts = part.name, part.counts
        self.src, self.tgt, self.rows = [], [], []
        for k, shard in enumerate(part.shards):
            shapes = {"src": (shard.src_tokens,), "tgt": (shard.tgt_tokens,), "pairs": (shard.pairs,)}
            for kind in KINDS:
                path = folder / part.name / f"{k:05d}.{kind}.npy"
                wanted_dtype = PAIR_ROW if kind == "pairs" else dtype
                mapped = _mapped(path, shard.files[kind], wanted_dtype, shapes[kind], check)
                {"src": self.src, "tgt": self.tgt, "pairs": self.rows}[kind].append(mapped)
        self.starts = np.cumsum([0] + [shard.pairs for shard in part.shards])
        if self.starts[-1] != part.pairs:
            raise AttnmtError(
                f"{folder / MANIFEST}: part {part.name} has {part.pairs} pairs, its shards {self.starts[-1]}; {REBUILD}"
            )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _row(self, i: int):
        if not 0 <= i < len(self):
            raise IndexError(i)
        shard = bisect_right(self.starts, i) - 1
        return shard, self.rows[shard][i - self.starts[shard]]

    def src_ids(self, i: int) -> list[int]:
        shard, row = self._row(i)
        return self.src[shard][row["src_start"] : row["src_start"] + row["src_length"]].tolist()

    def tgt_ids(self, i: int) -> list[int]:
        shard, row = self._row(i)
        return self.tgt[shard][row["tgt_start"] : row["tgt_start"] + row["tgt_length"]].tolist()

    def pairs(self) -> Iterator[tuple[int, list[int], list[int]]]:
        """Every pair of the part in order, (line, source ids, target ids), read from the maps a
        few thousand rows at a time (what a pass over a part holds)."""
        for src, tgt, rows in zip(self.src, self.tgt, self.rows):
            for start in range(0, len(rows), PASS_ROWS):
                for line, src_start, tgt_start, src_length, tgt_length in rows[start : start + PASS_ROWS].tolist():
                    yield (
                        line,
                        src[src_start : src_start + src_length].tolist(),
                        tgt[tgt_start : tgt_start + tgt_length].tolist(),
                    )

    def column(self, name: str) -> np.ndarray:
        """A column of PAIR_ROW ("line", "src_length", ...) for every pair of the part (in memory)."""
        return np.concatenate([rows[name] for rows in self.rows]) if self.rows else np.zeros(0, PAIR_ROW[name])


def _mapped(path: Path, recorded: ShardFile, dtype: np.dtype, shape: tuple, check: bool) -> np.ndarray:
    """The .npy file ``path`` mapped read-only, once its size (and with ``check``, unless its time
    is the one recorded, its SHA-256) are those of the manifest and it holds ``shape`` items of
    ``dtype``."""
    stat = _stat(path)
    size = stat.st_size
    if size != recorded.size:
        raise AttnmtError(
            f"{path}: {size:,} bytes where the store's manifest says {recorded.size:,}: the store is "
            f"truncated or damaged; {REBUILD}"
        )
    unchanged = recorded.mtime_ns is not None and stat.st_mtime_ns == recorded.mtime_ns
    if check and not unchanged and file_sha256(path) != recorded.sha256:
        raise AttnmtError(
            f"{path}: its SHA-256 is not the one in the store's manifest: the file was changed after it "
            f"was prepared; {REBUILD}"
        )
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise AttnmtError(f"{path}: not a numpy array file of the store ({e}); {REBUILD}") from None
    if array.dtype != dtype or array.shape != shape:
        raise AttnmtError(
            f"{path}: {array.dtype} {array.shape} where the store's manifest says {dtype} {shape}; {REBUILD}"
        )
    return array


class PairStore:
    """The store in ``folder`` with every shard mapped; ``check``: each file's SHA-256 compared with
    the manifest's first (one process of several may leave it to the one that prepared the store)."""

    def __init__(self, folder: Path, check: bool = True):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        dtype = np.dtype(self.manifest.token_dtype)
        self.parts = {part.name: StoredPart(self.folder, part, dtype, check) for part in self.manifest.parts}


class _Side:
    """One side of StoredPairs as a read-only sequence: ``side[i]`` the piece ids of pair i, a
    slice a list of them."""

    def __init__(self, pairs: StoredPairs, side: str):
        self.pairs, self.side = pairs, side

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.pairs.ids(self.side, i)


class StoredPairs:
    """The pairs of a store's parts one after the other, a part several times where it is repeated,
    each source after its part's prefix piece (a tag, or None): what a translation model trains on,
    read from the maps pair by pair. ``src_ids[i]`` and ``tgt_ids[i]`` are lists of ids, as in an
    encoded corpus in memory (attnmt.translation.prepare.EncodedCorpus)."""

    def __init__(self, segments: list[tuple[StoredPart, int | None]]):
        self.segments = segments
        self.starts = np.cumsum([0] + [len(part) for part, _ in segments])
        self.src_ids, self.tgt_ids = _Side(self, "src"), _Side(self, "tgt")
        self.alignments = (
            None  # guided alignment: each pair's links between pieces (attnmt.translation.guided_alignment)
        )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def ids(self, side: str, i: int) -> list[int]:
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(i)
        segment = bisect_right(self.starts, i) - 1
        part, prefix = self.segments[segment]
        local = i - int(self.starts[segment])
        if side == "tgt":
            return part.tgt_ids(local)
        return part.src_ids(local) if prefix is None else [prefix] + part.src_ids(local)

    def sizes(self) -> np.ndarray:
        """Padded length that each pair occupies in a batch (its longer side, +1 for BOS/EOS), in
        the smallest integer type that holds them (2 bytes a pair: the one array that grows with
        the corpus, beside the epoch's order), computed a shard at a time in one pass over the rows
        (32 bytes a pair on disk: at 30 million pairs a second pass read another 960 MB)."""
        shards = [np.zeros(0, np.uint16)]
        for part, prefix in self.segments:
            for rows in part.rows:
                sizes = np.maximum(rows["src_length"] + int(prefix is not None), rows["tgt_length"]) + 1
                # (uint16 unless a pair is longer; one int32 shard makes the whole array int32)
                shards.append(sizes.astype(np.uint16) if not len(sizes) or sizes.max() < 1 << 16 else sizes)
        return np.concatenate(shards)

    @property
    def lines(self) -> np.ndarray | None:
        """Each pair's line in its corpus files, where the pairs are those of one part (data.train)."""
        return self.segments[0][0].column("line") if len(self.segments) == 1 else None


class StoredLinks(Sequence):
    """Links between the pieces of each pair, from a store part whose "src" side holds each link's
    source position and whose "tgt" side its target position: ``links[i]`` pair i's
    [(source position, target position), ...] (guided alignment's reference links)."""

    def __init__(self, part: StoredPart):
        self.part = part

    def __len__(self) -> int:
        return len(self.part)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return list(zip(self.part.src_ids(i), self.part.tgt_ids(i)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)
