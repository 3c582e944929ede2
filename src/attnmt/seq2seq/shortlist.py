"""Vocabulary shortlists at decoding time: a table read from a model folder's shortlist.json,
and the output layer restricted to a batch's candidate pieces. How a table is made from aligned
training text, and the equations, are in attnmt.translation.shortlist.

For a batch of source sentences X the output layer is restricted to

    V' = union over pieces s of X of candidates(s)  +  frequent  +  PAD, UNK, BOS, EOS,

sorted: its logits are z' = W[V'] h + b[V'], the log-softmax runs over V' only, and a chosen
column c is the token V'[c]. PAD..EOS are ids 0..3 and come first, so they keep their columns (a
shortlist of every piece is the full vocabulary, column for column: the same translations and
scores).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Iterable, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import BOS, EOS, PAD, UNK, Subwords

FILE_NAME = "shortlist.json"


SPECIALS = (PAD, UNK, BOS, EOS)  # always in a shortlist, in their own columns (ids 0..3)


class TableFile(BaseModel):
    """shortlist.json."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["attnmt-shortlist"] = "attnmt-shortlist"
    version: Literal[1] = 1
    source_vocabulary: str  # sha256 of the source pieces (vocabulary_fingerprint)
    target_vocabulary: str
    top: int
    candidates: list[list[int]]  # per source id: its target ids, most often linked first
    frequent: list[int]  # the most frequent target ids of the training text, most frequent first


def vocabulary_fingerprint(subwords: Subwords) -> str:
    return hashlib.sha256("\n".join(subwords.pieces(list(range(len(subwords))))).encode()).hexdigest()


class Shortlist:
    """A lexical table ready for decoding: ``vocabulary(src)`` is the restricted output vocabulary V'."""

    def __init__(self, candidates: list[list[int]], always: Iterable[int]):
        # (source size, width): a row per source id, padded with EOS (which every V' holds); filled
        # by numpy at once (a Python list per row took 0.2 s for 8,000 rows, at every model load)
        lengths = np.fromiter(map(len, candidates), dtype=np.int64, count=len(candidates))
        ids = np.fromiter(chain.from_iterable(candidates), dtype=np.int64, count=int(lengths.sum()))
        table = np.full((len(candidates), max(1, int(lengths.max(initial=1)))), EOS, dtype=np.int64)
        rows = np.repeat(np.arange(len(candidates)), lengths)
        columns = np.arange(len(ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        table[rows, columns] = ids
        self.candidates = torch.from_numpy(table)
        self.always = torch.tensor(sorted(set(always) | set(SPECIALS)), dtype=torch.long)

    def to(self, device: torch.device) -> Shortlist:
        self.candidates, self.always = self.candidates.to(device), self.always.to(device)
        return self

    def vocabulary(self, src: Tensor) -> Tensor:
        """src (B,S) source ids (padded with PAD) -> V', the sorted target ids the output layer keeps."""
        if src.dtype != torch.long:
            raise AttnmtError("a vocabulary shortlist needs source pieces (a text model); this source is features")
        if self.candidates.device != src.device:
            self.to(src.device)
        picked = self.candidates[src.flatten()].flatten()
        return torch.cat([picked, self.always]).unique()  # (sorted)


def load_shortlist(path: str | Path, src_sw: Subwords, tgt_sw: Subwords) -> Shortlist:
    """The table of ``path`` for a model of these subwords, or a one-line AttnmtError."""
    path = Path(path)
    if not path.is_file():
        raise AttnmtError(f"{path}: no shortlist table there; build one with 'attnmt shortlist MODEL_DIR'")
    table = _read_table(path)
    if (table.source_vocabulary, table.target_vocabulary) != (
        vocabulary_fingerprint(src_sw),
        vocabulary_fingerprint(tgt_sw),
    ):
        raise AttnmtError(
            f"{path}: a shortlist table built for other vocabularies than this model's subwords; "
            "build one for this model with 'attnmt shortlist MODEL_DIR'"
        )
    ids = np.fromiter(chain(chain.from_iterable(table.candidates), table.frequent), dtype=np.int64)
    if len(table.candidates) != len(src_sw) or (len(ids) and not 0 <= ids.min() <= ids.max() < len(tgt_sw)):
        raise AttnmtError(
            f"{path}: the table's rows or ids do not fit the vocabularies ({len(src_sw)} source, "
            f"{len(tgt_sw)} target pieces); build it again with 'attnmt shortlist MODEL_DIR'"
        )
    return Shortlist(table.candidates, table.frequent)


def _read_table(path: Path) -> TableFile:
    try:
        return TableFile.model_validate_json(path.read_bytes())
    except OSError as e:
        raise AttnmtError(f"{path}: cannot read the shortlist table: {e.strerror or e}") from None
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise AttnmtError(
            f"{path}: {where + ': ' if where else ''}{error['msg']}; build it again with 'attnmt shortlist MODEL_DIR'"
        ) from None


@contextmanager
def restricted(model, vocabulary: Tensor | None):
    """Within the block, ``model``'s output layer scores the ids ``vocabulary`` only (None: all).
    The layer itself is changed meanwhile: one model must not decode in two threads at once (the
    server runs a model's work under its lock)."""
    if vocabulary is None:
        yield
        return
    generators = [member.generator for member in getattr(model, "members", [model])]  # (an ensemble: each)
    if not all(hasattr(generator, "restrict") for generator in generators):
        raise AttnmtError("a vocabulary shortlist needs the float32 or bf16 output layer, not int8")
    for generator in generators:
        generator.restrict(vocabulary)
    try:
        yield
    finally:
        for generator in generators:
            generator.restrict(None)
