"""From corpus files to encoded sentence pairs: read, train or load subwords, encode, filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnmt.core.config import Config, CorpusFiles
from attnmt.core.errors import AttnmtError
from attnmt.data import splits
from attnmt.data.corpus import Corpus, read_corpus
from attnmt.data.subwords import Subwords, load_subwords, prepared_subwords, subword_paths, train_subwords
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


def prepare(config: Config, log: Callable[[str], None] = print, force: bool = False,
            sentences: Callable[[], tuple[list[str], list[str]]] | None = None):
    """Trains the subword model(s) on the training corpus (unless present) and writes the
    config into the experiment folder, which then holds everything needed to translate.
    ``sentences``: the two sides to learn them from, if not the translation corpus's."""
    folder, sub = config.experiment_dir, config.data.subwords
    src_path, tgt_path = subword_paths(folder, sub.joint)
    trained = src_path.is_file() and tgt_path.is_file() and (folder / "spm" / "settings.yaml").is_file()
    if trained and config.data.held_out and not (folder / splits.FOLDER / splits.RECORD).is_file() and not force:
        raise AttnmtError(f"{src_path.parent} holds subwords trained before the held-out sets of data.dev/data.test "
                          "were drawn, so they saw those sentences: use 'attnmt prepare --force' to draw the sets "
                          "and retrain the subwords, or another experiment_dir")

    if config.training.init_from is not None:  # fine-tuning: the subwords of the model it starts from
        fine_tuning.check_same_subwords(config)

    def train():
        if config.training.init_from is not None:
            if config.data.held_out:  # drawn now, as where subwords are trained (a later prepare checks it)
                training_corpus(config, log)
            fine_tuning.copy_subwords(config, log)
            return load_subwords(folder, sub.joint)
        if sentences is None:
            corpus = training_corpus(config, log)
            sources, targets = corpus.sources, corpus.targets
        else:
            sources, targets = sentences()
        log(f"training {'joint' if sub.joint else 'separate'} {sub.type} subwords ({sub.vocab_size}) on "
            f"{len(sources)} pairs")
        return train_subwords(sources, targets, sub, folder, config.training.seed)

    return prepared_subwords(config, [src_path, tgt_path], train, lambda: load_subwords(folder, sub.joint), log,
                             force)


def training_corpus(config: Config, log: Callable[[str], None] = print) -> Corpus:
    """The pairs to train on: data.train less the dev and test pairs held out of it (drawn on the
    first call: attnmt.data.splits)."""
    corpus = read_corpus(config.data.train.as_spec())
    return splits.without(corpus, splits.hold_out(config, corpus, log))


def encode_corpus(files: CorpusFiles, src_sw: Subwords, tgt_sw: Subwords, max_length: int | None,
                  log: Callable[[str], None] = print, corpus: Corpus | None = None,
                  max_source_words: int | None = None) -> EncodedCorpus:
    """The pairs of ``files`` (or ``corpus``, read from them) encoded, those longer than
    ``max_length`` subwords, or whose source has more than ``max_source_words`` words, dropped with
    a count in the log."""
    corpus = corpus or read_corpus(files.as_spec())
    data = EncodedCorpus(corpus.sources, corpus.targets, src_sw.encode(corpus.sources),
                         tgt_sw.encode(corpus.targets), corpus.lines)
    if max_length is None and max_source_words is None:
        _report_dropped(files, corpus.dropped_empty, 0, log)
        return data
    keep = [i for i in range(len(data)) if (max_length is None or max(len(data.src_ids[i]),
                                                                          len(data.tgt_ids[i])) <= max_length)]
    _report_dropped(files, corpus.dropped_empty, len(data) - len(keep), log, max_length)
    if max_source_words is not None:
        short = [i for i in keep if len(data.sources[i].split()) <= max_source_words]
        if len(short) < len(keep):
            log(f"{files.tsv or files.src}: dropped {len(keep) - len(short)} pair(s) whose source has more than "
                f"{max_source_words} words (data.max_source_words)")
        keep = short
    if not keep:
        raise AttnmtError(f"{files.tsv or files.src}: no sentence pair is short enough (data.max_length "
                          f"{max_length} subwords, data.max_source_words {max_source_words}); raise them")
    return EncodedCorpus(*([column[i] for i in keep] for column in
                           (data.sources, data.targets, data.src_ids, data.tgt_ids)),
                         None if data.lines is None else [data.lines[i] for i in keep])


def _report_dropped(files: CorpusFiles, empty: int, long: int, log, max_length: int | None = None):
    name = files.tsv or files.src
    if empty:
        log(f"{name}: dropped {empty} pair(s) with an empty side")
    if long:
        log(f"{name}: dropped {long} pair(s) longer than {max_length} subwords")
