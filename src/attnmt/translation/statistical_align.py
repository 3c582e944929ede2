"""The statistical baseline for attention's word alignments: eflomal (Östling & Tiedemann 2016),
a Bayesian IBM-style aligner (model 1: IBM Model 1; 2: with an HMM for distortion; 3: and
fertility), trained by Gibbs sampling on the very sentence pairs it aligns. PyPI ``eflomal``
(``pip install 'attnmt[experiments]'``).

eflomal reads files: `EflomalInput` writes the whitespace words of sentence pairs into two files
as the pairs pass (a training corpus streamed, never held), `align_files` runs eflomal on them,
and the links it writes are read back one line at a time (`EflomalInput.links`). What eflomal
itself holds while it samples (every sentence as an array of word ids, in Python and in its own
process) is eflomal's: it needs the whole text at once."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import stream_lines
from attnmt.seq2seq.links import Link
from attnmt.translation.align import parse_pharaoh


def eflomal_links(sources: list[str], targets: list[str], model: int = 3) -> tuple[list[list[Link]], list[list[Link]]]:
    """Word alignments of every pair (whitespace-separated words, 0-based) in both directions,
    each as source-target links: (forward, backward), ready for attnmt.translation.align.symmetrize.
    (Held in memory: for a few pairs; a corpus goes through `EflomalInput`.)"""
    if len(sources) != len(targets):
        raise AttnmtError(f"numbers of sentences differ: {len(sources)} sources, {len(targets)} targets")
    with EflomalInput() as words:
        for source, target in zip(sources, targets):
            words.add(source, target)
        forward, backward = [], []
        for f, b in words.links(model):
            forward.append(f)
            backward.append(b)
        return forward, backward


def align_files(source: Path, target: Path, forward: Path, backward: Path, model: int = 3):
    """eflomal run on ``source`` and ``target`` (one sentence a line, whitespace words): the links of
    each line in both directions, each as source-target links (Pharaoh, 0-based), written to
    ``forward`` and ``backward``."""
    try:
        import eflomal
    except ImportError:
        raise AttnmtError(
            "the statistical aligner needs the eflomal package: pip install eflomal "
            "(or pip install 'attnmt[experiments]')"
        ) from None
    with open(source, encoding="utf-8", newline="\n") as src, open(target, encoding="utf-8", newline="\n") as tgt:
        eflomal.Aligner(model=model).align(
            src, tgt, links_filename_fwd=str(forward), links_filename_rev=str(backward), quiet=True
        )


class EflomalInput:
    """The words of sentence pairs written to two files as they are added (``add``), one pair a
    line, in a temporary folder (in ``where``, else the system's), removed when the block ends;
    ``links`` runs eflomal on them and reads its links back a pair at a time. Used as a context
    manager."""

    def __init__(self, where: Path | None = None):
        self._folder = tempfile.TemporaryDirectory(prefix="attnmt-eflomal-", dir=where)
        self.folder = Path(self._folder.name)
        self.source, self.target = self.folder / "source.txt", self.folder / "target.txt"
        self._files = [open(path, "w", encoding="utf-8", newline="\n") for path in (self.source, self.target)]
        self.pairs = 0

    def __enter__(self) -> EflomalInput:
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._close_files()
        self._folder.cleanup()

    def _close_files(self):
        for f in self._files:
            f.close()

    def add(self, source: str, target: str) -> tuple[str, str]:
        """A pair's words written, separated by single spaces (what eflomal reads of the line): a
        sentence is one line whatever whitespace it holds. Returns them."""
        words = " ".join(source.split()), " ".join(target.split())
        for f, line in zip(self._files, words):
            f.write(line + "\n")
        self.pairs += 1
        return words

    def links(self, model: int = 3) -> Iterator[tuple[list[Link], list[Link]]]:
        """eflomal's links of every pair added, in their order: (forward, backward), each sorted
        source-target links, read from its files one line at a time (it may run again, with
        another ``model``)."""
        self._close_files()
        forward, backward = self.folder / f"forward.{model}", self.folder / f"backward.{model}"
        if not forward.is_file():
            align_files(self.source, self.target, forward, backward, model)
        return zip(_read_links(forward, self.pairs), _read_links(backward, self.pairs))


def _read_links(path: Path, pairs: int) -> Iterator[list[Link]]:
    """The links of the first ``pairs`` lines of eflomal's file ``path``, one line at a time."""
    count = 0
    for count, line in enumerate(stream_lines(path), start=1):
        if count > pairs:
            return
        yield sorted(parse_pharaoh(line, allow_possible=False, where=f"eflomal, pair {count}")[0])
    if count < pairs:
        raise AttnmtError(f"{path}: eflomal wrote the links of {count} pairs, not of {pairs}")
