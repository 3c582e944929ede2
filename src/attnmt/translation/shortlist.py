"""Vocabulary shortlists for decoding, as Marian's lexical shortlists and CTranslate2's vocabulary
map: the output layer scores only the target pieces that a batch's source makes likely.

The lexical table. The word links of the training text (eflomal's, grow-diag-final, as guided
alignment computes them) become links between subword pieces; for each source piece s the table
keeps the ``top`` target pieces most often linked to it,

    candidates(s) = the top K of  count(s, t) = number of links s-t in the training pairs,

and the ``frequent`` most frequent target pieces of the training text. ``attnmt shortlist
MODEL_DIR`` writes it as MODEL_DIR/shortlist.json (plain JSON: ids, and a fingerprint of each
vocabulary so that a table is never used with another model's subwords).

Decoding. For a batch of source sentences X the output layer is restricted to

    V' = union over pieces s of X of candidates(s)  +  frequent  +  PAD, UNK, BOS, EOS,

sorted: its logits are z' = W[V'] h + b[V'], the log-softmax runs over V' only, and a chosen
column c is the token V'[c]. PAD..EOS are ids 0..3 and come first, so they keep their columns (a
shortlist of every piece is the full vocabulary, column for column: the same translations and
scores).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable

from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text
from attnmt.seq2seq.shortlist import (
    FILE_NAME,
    TableFile,
    vocabulary_fingerprint,
)

PieceLink = tuple[int, int]  # (source piece position, target piece position) in a pair


def lexical_table(
    pairs: Iterable[tuple[list[int], list[int], list[PieceLink]]], top: int, frequent: int
) -> tuple[dict[int, list[int]], list[int]]:
    """pairs of (source ids, target ids, piece links) -> the ``top`` target ids most often linked
    to each source id, and the ``frequent`` most frequent target ids (ties: the smaller id first)."""
    links: dict[int, Counter] = defaultdict(Counter)
    target_counts: Counter = Counter()
    for src_ids, tgt_ids, pair_links in pairs:
        target_counts.update(tgt_ids)
        for s, t in pair_links:
            links[src_ids[s]][tgt_ids[t]] += 1
    candidates = {s: _most_common(counts, top) for s, counts in links.items()}
    return candidates, _most_common(target_counts, frequent)


def _most_common(counts: Counter, n: int) -> list[int]:
    return [i for i, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]]


# ------------------------------------------------------------------------------- building


def build_shortlist(folder: str | Path, top: int = 50, frequent: int = 100, log: Callable[[str], None] = print) -> Path:
    """Writes FOLDER/shortlist.json from eflomal's links of the training corpus that the folder's
    config names (computed once, cached in FOLDER/alignment/)."""
    from attnmt.core.folders import model_config
    from attnmt.data.subwords import load_subwords
    from attnmt.translation.guided_alignment import eflomal_file, piece_links
    from attnmt.translation.reference_links import read_link_file
    from attnmt.translation.prepare import encode_corpus, training_corpus

    folder = Path(folder)
    config = model_config(folder)
    if config.task != "translation":
        raise AttnmtError(f"{folder}: a shortlist is for translation models; this is a {config.task} model")
    src_sw, tgt_sw = load_subwords(folder, config.data.subwords.joint)
    train = encode_corpus(
        config.data.train,
        src_sw,
        tgt_sw,
        config.data.max_length,
        log,
        corpus=training_corpus(config, log),
        max_source_words=config.data.max_source_words,
        max_length_ratio=config.data.max_length_ratio,
    )  # (the pairs it trained on)
    words = [(" ".join(s.split()), " ".join(t.split())) for s, t in zip(train.sources, train.targets)]
    path = eflomal_file(config, [s for s, _ in words], [t for _, t in words], log)
    word_links = read_link_file(path, len(train), one_based=False)

    def pairs():
        for src_ids, tgt_ids, links in zip(train.src_ids, train.tgt_ids, word_links):
            pieces = piece_links(links, src_sw.pieces(src_ids), tgt_sw.pieces(tgt_ids))
            yield src_ids, tgt_ids, pieces or []

    candidates, most_frequent = lexical_table(pairs(), top, frequent)
    table = TableFile(
        source_vocabulary=vocabulary_fingerprint(src_sw),
        target_vocabulary=vocabulary_fingerprint(tgt_sw),
        top=top,
        candidates=[candidates.get(s, []) for s in range(len(src_sw))],
        frequent=most_frequent,
    )
    out = folder / FILE_NAME
    atomic_write_text(out, table.model_dump_json() + "\n")
    log(
        f"shortlist: {out}: top {top} target pieces for each of {len(candidates):,} linked source pieces, "
        f"{len(most_frequent)} most frequent, from {len(train):,} training pairs"
    )
    return out
