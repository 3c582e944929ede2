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
    """Writes FOLDER/shortlist.json from eflomal's links of the training pairs of the folder's config
    (computed once, cached in FOLDER/alignment/). The pairs are those the model trained on, read
    from the experiment's store (prepared if it is missing or stale, as `attnmt train` does), their
    texts streamed from the corpus into eflomal's files; the links are read back a pair at a time
    beside the stored pieces, so that what is held is the table's counts, not the corpus."""
    from attnmt.core.folders import model_config
    from attnmt.data.subwords import load_subwords
    from attnmt.translation.guided_alignment import eflomal_file, piece_links, training_texts
    from attnmt.translation.prepare import prepared_store
    from attnmt.translation.reference_links import stream_link_file

    folder = Path(folder)
    config = model_config(folder)
    if config.task != "translation":
        raise AttnmtError(f"{folder}: a shortlist is for translation models; this is a {config.task} model")
    src_sw, tgt_sw = load_subwords(folder, config.data.subwords.joint)
    train = prepared_store(config, src_sw, tgt_sw, log).parts["train"]  # (the pairs it trained on)
    path = eflomal_file(config, lambda: training_texts(config, (line for line, _, _ in train.pairs())), log)
    word_links = stream_link_file(path, len(train), one_based=False)

    def pairs():
        for (_, src_ids, tgt_ids), links in zip(train.pairs(), word_links):
            pieces = piece_links(links, src_sw.pieces(src_ids), tgt_sw.pieces(tgt_ids))
            yield src_ids, tgt_ids, pieces or []
        for _ in word_links:  # (to its end: a file of another length is an error naming it)
            pass

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
