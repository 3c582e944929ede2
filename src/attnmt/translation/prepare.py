"""From corpus files to encoded sentence pairs: read, train or load subwords, encode, filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnmt.core.config import Config, CorpusFiles, ExtraCorpus
from attnmt.core.errors import AttnmtError
from attnmt.data import splits
from attnmt.data.corpus import Corpus, read_corpus
from attnmt.data.subwords import UNK, Subwords, load_subwords, prepared_subwords, subword_paths, train_subwords
from attnmt.training import fine_tuning


@dataclass
class EncodedCorpus:
    sources: list[str]  # raw text, for BLEU against references
    targets: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    lines: list[int] | None = None  # each pair's line in the corpus files (Corpus.lines)
    # Guided alignment: each pair's reference links between pieces, (source piece, target piece)
    alignments: list[list[tuple[int, int]]] | None = None

    def __len__(self):
        return len(self.src_ids)

    def sizes(self) -> list[int]:
        """Padded length that a pair occupies in a batch (+1 for BOS/EOS)."""
        return [max(len(s), len(t)) + 1 for s, t in zip(self.src_ids, self.tgt_ids)]


def prepare(
    config: Config,
    log: Callable[[str], None] = print,
    force: bool = False,
    sentences: Callable[[], tuple[list[str], list[str]]] | None = None,
):
    """Trains the subword model(s) on the training corpus (unless present) and writes the
    config into the experiment folder, which then holds everything needed to translate.
    ``sentences``: the two sides to learn them from, if not the translation corpus's."""
    folder, sub = config.experiment_dir, config.data.subwords
    src_path, tgt_path = subword_paths(folder, sub.joint)
    trained = src_path.is_file() and tgt_path.is_file() and (folder / "spm" / "settings.yaml").is_file()
    if trained and config.data.held_out and not (folder / splits.FOLDER / splits.RECORD).is_file() and not force:
        raise AttnmtError(
            f"{src_path.parent} holds subwords trained before the held-out sets of data.dev/data.test "
            "were drawn, so they saw those sentences: use 'attnmt prepare --force' to draw the sets "
            "and retrain the subwords, or another experiment_dir"
        )

    if config.training.init_from is not None:  # fine-tuning: the subwords of the model it starts from
        fine_tuning.check_same_subwords(config)

    def train():
        if config.training.init_from is not None:
            if config.data.held_out:  # drawn now, as where subwords are trained (a later prepare checks it)
                training_corpus(config, log)
            fine_tuning.copy_subwords(config, log)
            return load_subwords(folder, sub.joint)
        if sentences is None:
            corpora = [training_corpus(config, log), *(corpus for _, corpus in extra_corpora(config))]
            sources, targets = [s for c in corpora for s in c.sources], [t for c in corpora for t in c.targets]
        else:
            sources, targets = sentences()
        log(
            f"training {'joint' if sub.joint else 'separate'} {sub.type} subwords ({sub.vocab_size}) on "
            f"{len(sources)} pairs"
        )
        return train_subwords(sources, targets, sub, folder, config.training.seed, config.data.tags)

    return prepared_subwords(
        config, [src_path, tgt_path], train, lambda: load_subwords(folder, sub.joint), log, force, config.data.tags
    )


def training_corpus(config: Config, log: Callable[[str], None] = print) -> Corpus:
    """The pairs to train on: data.train less the dev and test pairs held out of it (drawn on the
    first call: attnmt.data.splits)."""
    corpus = read_corpus(config.data.train.as_spec())
    return splits.without(corpus, splits.hold_out(config, corpus, log))


def extra_corpora(config: Config) -> list[tuple[ExtraCorpus, Corpus]]:
    """The corpora of data.extra_train, read."""
    return [(files, read_corpus(files.as_spec())) for files in config.data.extra_train]


def training_pairs(
    config: Config, src_sw: Subwords, tgt_sw: Subwords, log: Callable[[str], None] = print
) -> EncodedCorpus:
    """What a translation model trains on: data.train (less its held-out sets), then each corpus of
    data.extra_train ``repeat`` times, its sources after its tag's piece; pairs too long or too
    uneven dropped (data.max_length, data.max_source_words, data.max_length_ratio; the tag not counted)."""
    data = config.data
    limits = {
        "max_length": data.max_length,
        "max_source_words": data.max_source_words,
        "max_length_ratio": data.max_length_ratio,
    }
    train = encode_corpus(data.train, src_sw, tgt_sw, log=log, corpus=training_corpus(config, log), **limits)
    if not data.extra_train:
        return train
    parts = [train]
    for files, corpus in extra_corpora(config):
        extra = encode_corpus(files, src_sw, tgt_sw, log=log, corpus=corpus, **limits)
        if files.tag is not None:  # (its piece, not its text: "<BT> a" would be cut "▁", "<BT>", "▁a")
            tag = tag_piece(src_sw, files.tag)
            extra.src_ids = [[tag] + ids for ids in extra.src_ids]
        log(
            f"{files.tsv or files.src}: {len(extra):,} extra training pairs"
            + (f", tagged {files.tag}" if files.tag else "")
            + (f", {files.repeat} times" if files.repeat > 1 else "")
        )
        parts += [extra] * files.repeat
    return EncodedCorpus(
        *(
            [item for part in parts for item in getattr(part, column)]
            for column in ("sources", "targets", "src_ids", "tgt_ids")
        )
    )  # (lines: data.train's only)


def tag_piece(src_sw: Subwords, tag: str) -> int:
    """The id of ``tag`` in the source vocabulary; AttnmtError if it has none (subwords trained
    without it, such as those of training.init_from)."""
    piece = src_sw.sp.piece_to_id(tag)
    if piece == UNK:
        raise AttnmtError(
            f"data.extra_train: the tag {tag!r} is no piece of the subwords in {src_sw.path.parent} "
            "(trained without it): tags are learnt with the subwords, so a model fine-tuned from them "
            "cannot add one"
        )
    return piece


def encode_corpus(
    files: CorpusFiles,
    src_sw: Subwords,
    tgt_sw: Subwords,
    max_length: int | None,
    log: Callable[[str], None] = print,
    corpus: Corpus | None = None,
    max_source_words: int | None = None,
    max_length_ratio: float | None = None,
) -> EncodedCorpus:
    """The pairs of ``files`` (or ``corpus``, read from them) encoded, those longer than
    ``max_length`` subwords, whose source has more than ``max_source_words`` words, or whose longer
    side has more than ``max_length_ratio`` times the pieces of the shorter, dropped with a count in
    the log."""
    corpus = corpus or read_corpus(files.as_spec())
    data = EncodedCorpus(
        corpus.sources, corpus.targets, src_sw.encode(corpus.sources), tgt_sw.encode(corpus.targets), corpus.lines
    )
    if max_length is None and max_source_words is None and max_length_ratio is None:
        _report_dropped(files, corpus.dropped_empty, 0, log)
        return data
    keep = [
        i
        for i in range(len(data))
        if (max_length is None or max(len(data.src_ids[i]), len(data.tgt_ids[i])) <= max_length)
    ]
    _report_dropped(files, corpus.dropped_empty, len(data) - len(keep), log, max_length)
    name = files.tsv or files.src
    if max_source_words is not None:
        short = [i for i in keep if len(data.sources[i].split()) <= max_source_words]
        if len(short) < len(keep):
            log(
                f"{name}: dropped {len(keep) - len(short)} pair(s) whose source has more than "
                f"{max_source_words} words (data.max_source_words)"
            )
        keep = short
    if max_length_ratio is not None:
        even = [i for i in keep if _length_ratio(data.src_ids[i], data.tgt_ids[i]) <= max_length_ratio]
        if len(even) < len(keep):
            log(
                f"{name}: dropped {len(keep) - len(even)} pair(s) whose longer side has more than "
                f"{max_length_ratio:g} times the subwords of the shorter (data.max_length_ratio)"
            )
        keep = even
    if not keep:
        raise AttnmtError(
            f"{name}: no sentence pair is left (data.max_length {max_length} subwords, "
            f"data.max_source_words {max_source_words}, data.max_length_ratio {max_length_ratio})"
        )
    return EncodedCorpus(
        *([column[i] for i in keep] for column in (data.sources, data.targets, data.src_ids, data.tgt_ids)),
        None if data.lines is None else [data.lines[i] for i in keep],
    )


def _length_ratio(src_ids: list[int], tgt_ids: list[int]) -> float:
    return max(len(src_ids), len(tgt_ids)) / max(min(len(src_ids), len(tgt_ids)), 1)


def _report_dropped(files: CorpusFiles, empty: int, long: int, log, max_length: int | None = None):
    name = files.tsv or files.src
    if empty:
        log(f"{name}: dropped {empty} pair(s) with an empty side")
    if long:
        log(f"{name}: dropped {long} pair(s) longer than {max_length} subwords")
