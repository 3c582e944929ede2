"""The statistical baseline for attention's word alignments: eflomal (Östling & Tiedemann 2016),
a Bayesian IBM-style aligner (model 1: IBM Model 1; 2: with an HMM for distortion; 3: and
fertility), trained by Gibbs sampling on the very sentence pairs it aligns. PyPI ``eflomal``
(``pip install 'attnmt[experiments]'``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.links import Link
from attnmt.translation.align import parse_pharaoh


def eflomal_links(sources: list[str], targets: list[str], model: int = 3) -> tuple[list[list[Link]], list[list[Link]]]:
    """Word alignments of every pair (whitespace-separated words, 0-based) in both directions,
    each as source-target links: (forward, backward), ready for attnmt.translation.align.symmetrize."""
    try:
        import eflomal
    except ImportError:
        raise AttnmtError(
            "the statistical aligner needs the eflomal package: pip install eflomal "
            "(or pip install 'attnmt[experiments]')"
        ) from None
    if len(sources) != len(targets):
        raise AttnmtError(f"numbers of sentences differ: {len(sources)} sources, {len(targets)} targets")
    with tempfile.TemporaryDirectory() as tmp:
        forward, backward = Path(tmp) / "forward", Path(tmp) / "backward"
        eflomal.Aligner(model=model).align(
            sources, targets, links_filename_fwd=str(forward), links_filename_rev=str(backward), quiet=True
        )
        return _read_links(forward, len(sources)), _read_links(backward, len(sources))


def _read_links(path: Path, pairs: int) -> list[list[Link]]:
    lines = path.read_text(encoding="utf-8").split("\n")[:pairs]
    return [
        sorted(parse_pharaoh(line, allow_possible=False, where=f"eflomal, pair {k + 1}")[0])
        for k, line in enumerate(lines)
    ]
