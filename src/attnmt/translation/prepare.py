"""From corpus files to encoded sentence pairs: read, train or load subwords, encode, filter."""

from __future__ import annotations

import multiprocessing
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from attnmt.core.config import Config, CorpusFiles, DataConfig
from attnmt.core.errors import AttnmtError
from attnmt.core.files import file_sha256
from attnmt.core.progress import phase_bar
from attnmt.data import splits, store
from attnmt.data.corpus import Corpus, CorpusPairs, read_corpus
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


def prepare(config: Config, log: Callable[[str], None] = print, force: bool = False) -> tuple[Subwords, Subwords]:
    """`attnmt prepare`: the subword models (`prepare_subwords`) and the store of the encoded
    training pairs (`prepared_store`), each made unless it is there (or with ``force``)."""
    subwords = prepare_subwords(config, log, force)
    prepared_store(config, *subwords, log, force)
    return subwords


def prepare_subwords(
    config: Config,
    log: Callable[[str], None] = print,
    force: bool = False,
    sentences: Callable[[], tuple[list[str], list[str]]] | None = None,
) -> tuple[Subwords, Subwords]:
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
            splits.hold_out(config, log)  # drawn now, as where subwords are trained (a later prepare checks it)
            fine_tuning.copy_subwords(config, log)
            return load_subwords(folder, sub.joint)
        pairs = _counted(training_sentences(config, log) if sentences is None else zip(*sentences()))
        subwords = train_subwords(pairs, sub, folder, config.training.seed, config.data.tags)
        sampled = pairs.count * (2 if sub.joint else 1) > sub.max_sentences
        log(
            f"trained {'joint' if sub.joint else 'separate'} {sub.type} subwords ({sub.vocab_size}) on "
            f"{pairs.count} pairs" + (f" (a sample of {sub.max_sentences:,} sentences)" if sampled else "")
        )
        return subwords

    return prepared_subwords(
        config, [src_path, tgt_path], train, lambda: load_subwords(folder, sub.joint), log, force, config.data.tags
    )


def training_sentences(config: Config, log: Callable[[str], None] = print) -> Iterator[tuple[str, str]]:
    """The pairs the subwords learn from, read line by line: data.train less the dev and test pairs
    held out of it (drawn on the first call), then each corpus of data.extra_train."""
    for _, source, target in training_lines(config, log):
        yield source, target
    for files in config.data.extra_train:
        for _, source, target in CorpusPairs(files.as_spec()):
            yield source, target


def training_lines(config: Config, log: Callable[[str], None] = print) -> Iterator[tuple[int, str, str]]:
    """The pairs to train on, read line by line as they are wanted: (line, source, target) of each
    pair of data.train (its line in the files, from 0) less the dev and test pairs held out of it
    (drawn on the first call: attnmt.data.splits). AttnmtError if the corpus has no pair."""
    held_out = {k for lines in splits.hold_out(config, log).values() for k in lines}
    train = CorpusPairs(config.data.train.as_spec())
    read = 0
    for read, pair in enumerate(train, start=1):
        if read - 1 not in held_out:
            yield pair
    if not read:
        raise train.empty_error()


class _counted:
    """An iterator that counts what it hands out (``count``)."""

    def __init__(self, items):
        self.items, self.count = iter(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.items)
        self.count += 1
        return item


def training_pairs(
    config: Config, prepared: store.PairStore, src_sw: Subwords, log: Callable[[str], None] = print
) -> store.StoredPairs:
    """What a translation model trains on, read from the store: data.train (less its held-out sets),
    then each corpus of data.extra_train ``repeat`` times, its sources after its tag's piece (the
    pairs too long or too uneven were dropped when the store was prepared, the tag not counted)."""
    segments = [(prepared.parts["train"], None)]
    for name, files in store_parts(config)[1:]:
        part = prepared.parts[name]
        # (its piece, not its text: "<BT> a" would be cut "▁", "<BT>", "▁a")
        tag = None if files.tag is None else tag_piece(src_sw, files.tag)
        log(
            f"{files.tsv or files.src}: {len(part):,} extra training pairs"
            + (f", tagged {files.tag}" if files.tag else "")
            + (f", {files.repeat} times" if files.repeat > 1 else "")
        )
        segments += [(part, tag)] * files.repeat
    return store.StoredPairs(segments)


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
    the log (held in memory, with their texts: dev and test sets; the training corpora are encoded
    into the store, `prepared_store`, and read from it)."""
    corpus = corpus or read_corpus(files.as_spec())
    limits = Limits(max_length, max_source_words, max_length_ratio)
    src_ids, tgt_ids = src_sw.encode(corpus.sources), tgt_sw.encode(corpus.targets)
    keep, counts = within_limits(corpus.sources, src_ids, tgt_ids, limits)
    report_dropped(files.tsv or files.src, {"empty": corpus.dropped_empty, **counts, "kept": len(keep)}, limits, log)
    return EncodedCorpus(
        [corpus.sources[i] for i in keep],
        [corpus.targets[i] for i in keep],
        [src_ids[i] for i in keep],
        [tgt_ids[i] for i in keep],
        None if corpus.lines is None else [corpus.lines[i] for i in keep],
    )


@dataclass(frozen=True)
class Limits:
    """What pairs are dropped for (data.max_length, data.max_source_words, data.max_length_ratio)."""

    max_length: int | None = None
    max_source_words: int | None = None
    max_length_ratio: float | None = None

    @classmethod
    def of(cls, data: DataConfig) -> Limits:
        return cls(data.max_length, data.max_source_words, data.max_length_ratio)


def within_limits(
    sources: list[str], src_ids: list[list[int]], tgt_ids: list[list[int]], limits: Limits
) -> tuple[list[int], dict[str, int]]:
    """The positions of the pairs within ``limits``, and how many each limit dropped: first the
    pairs longer than max_length subwords ("long"), then of the rest those whose source has more
    than max_source_words words ("words"), then those whose longer side has more than
    max_length_ratio times the pieces of the shorter ("uneven")."""
    keep, counts = range(len(src_ids)), {}
    if limits.max_length is not None:
        keep = [i for i in keep if max(len(src_ids[i]), len(tgt_ids[i])) <= limits.max_length]
        counts["long"] = len(src_ids) - len(keep)
    if limits.max_source_words is not None:
        short = [i for i in keep if len(sources[i].split()) <= limits.max_source_words]
        keep, counts["words"] = short, len(keep) - len(short)
    if limits.max_length_ratio is not None:
        even = [i for i in keep if _length_ratio(src_ids[i], tgt_ids[i]) <= limits.max_length_ratio]
        keep, counts["uneven"] = even, len(keep) - len(even)
    return list(keep), counts


def _length_ratio(src_ids: list[int], tgt_ids: list[int]) -> float:
    return max(len(src_ids), len(tgt_ids)) / max(min(len(src_ids), len(tgt_ids)), 1)


def report_dropped(name, counts: dict[str, int], limits: Limits, log: Callable[[str], None]):
    """The log's lines on the pairs of corpus ``name`` dropped (counts as `within_limits` and the
    reader give them: "empty", "long", "words", "uneven"); AttnmtError if none is left ("kept")."""
    if counts.get("empty"):
        log(f"{name}: dropped {counts['empty']} pair(s) with an empty side")
    if counts.get("long"):
        log(f"{name}: dropped {counts['long']} pair(s) longer than {limits.max_length} subwords")
    if counts.get("words"):
        log(
            f"{name}: dropped {counts['words']} pair(s) whose source has more than "
            f"{limits.max_source_words} words (data.max_source_words)"
        )
    if counts.get("uneven"):
        log(
            f"{name}: dropped {counts['uneven']} pair(s) whose longer side has more than "
            f"{limits.max_length_ratio:g} times the subwords of the shorter (data.max_length_ratio)"
        )
    if counts.get("kept", 1) == 0:
        raise AttnmtError(
            f"{name}: no sentence pair is left (data.max_length {limits.max_length} subwords, "
            f"data.max_source_words {limits.max_source_words}, data.max_length_ratio {limits.max_length_ratio})"
        )


# ---------------------------------------------------------------- the prepared store

CHUNK_PAIRS = 2_000  # pairs encoded at a time (by one worker)


def store_parts(config: Config) -> list[tuple[str, CorpusFiles]]:
    """The store's parts: data.train, then each corpus of data.extra_train."""
    return [("train", config.data.train)] + [
        (f"extra-{k}", files) for k, files in enumerate(config.data.extra_train, 1)
    ]


def _files_of(files: CorpusFiles) -> list[Path]:
    return [Path(files.tsv)] if files.tsv is not None else [Path(files.src), Path(files.tgt)]


def store_settings(config: Config, src_sw: Subwords, tgt_sw: Subwords) -> dict:
    """Everything but the files' contents that decides what the store holds: the subword models,
    the filters, the pairs held out of data.train, how each corpus is read. (Tags and repeat counts
    are applied when training reads the store: they are not in it.)"""
    data = config.data
    return {
        "subwords": [file_sha256(src_sw.path), file_sha256(tgt_sw.path)],
        "limits": asdict(Limits.of(data)),
        "held_out": {"seed": config.training.seed, "sizes": data.held_out} if data.held_out else None,
        "parts": [{"name": name, **files.as_spec()} for name, files in store_parts(config)],
    }


def prepared_store(
    config: Config,
    src_sw: Subwords,
    tgt_sw: Subwords,
    log: Callable[[str], None] = print,
    force: bool = False,
    check: bool = True,
) -> store.PairStore:
    """The experiment's store of encoded training pairs (EXPERIMENT/store, attnmt.data.store):
    reused if it was made from the same files, subwords and settings, else (or with ``force``)
    prepared again; the pairs dropped by the filters reported, as whenever the corpora are read.
    ``check``: the store's files checked against their SHA-256 (one process of several may leave
    it to the main one)."""
    folder = config.experiment_dir / store.FOLDER
    settings = store_settings(config, src_sw, tgt_sw)
    reason = "attnmt prepare --force" if force else store.stale_reason(folder, _input_paths(config), settings)
    if reason is not None:
        again = "" if reason == "no store" else f"{reason}: "
        log(f"{again}preparing the store of the training pairs in {folder} ({config.data.workers} process(es))")
        build_store(config, src_sw, tgt_sw, settings, log)
    prepared = store.PairStore(folder, check=check and reason is None)
    train = prepared.parts["train"]
    if reason is None and config.data.held_out:  # the held-out record checked against the corpus's size
        splits.hold_out(config, log, pairs=train.counts["encoded"] + train.counts["held_out"])
    limits = Limits.of(config.data)
    for name, files in store_parts(config):
        part = prepared.parts[name]
        report_dropped(files.tsv or files.src, {**part.counts, "kept": len(part)}, limits, log)
    return prepared


def _input_paths(config: Config) -> list[Path]:
    return [path for _, files in store_parts(config) for path in _files_of(files)]


def build_store(config: Config, src_sw: Subwords, tgt_sw: Subwords, settings: dict, log: Callable[[str], None]):
    """Reads each training corpus line by line, encodes its pairs (in data.workers processes),
    filters them (data.max_length, ...) and writes them into the store, data.train without its
    held-out pairs; nothing is left of the store if anything fails."""
    held_out = {k for lines in splits.hold_out(config, log).values() for k in lines}
    limits = Limits.of(config.data)
    dtype = store.token_dtype(max(len(src_sw), len(tgt_sw)))
    # (the files' stamps before they are read: one changed while it is read is changed next time)
    inputs = [store.input_file(path) for path in _input_paths(config)]
    folder = config.experiment_dir / store.FOLDER
    with (
        store.StoreWriter(folder, dtype) as writer,
        _encoder(config.data.workers, src_sw, tgt_sw) as encode,
        phase_bar(None, "preparing the store", unit="line") as bar,
    ):
        for name, files in store_parts(config):
            writer.start_part(name)
            pairs = CorpusPairs(files.as_spec())
            skip = held_out if name == "train" else set()
            for chunk in encode(_chunks(pairs, skip), limits, dtype):
                writer.add(chunk)
                bar.update(chunk.counts["encoded"])
            writer.count({"empty": pairs.dropped_empty, "held_out": len(skip)})
            if writer.parts[-1].counts.get("encoded", 0) + len(skip) == 0:
                raise pairs.empty_error()
        writer.finish(inputs, settings)


def _chunks(pairs: CorpusPairs, skip: set[int]) -> Iterator[list[tuple[int, str, str]]]:
    """The pairs (line, source, target) in chunks of CHUNK_PAIRS, less those whose position among
    the pairs is in ``skip`` (the held-out ones)."""
    chunk = []
    for k, pair in enumerate(pairs):
        if k not in skip:
            chunk.append(pair)
            if len(chunk) == CHUNK_PAIRS:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


_worker_subwords: tuple[Subwords, Subwords] | None = None  # in a worker process: the models it encodes with


def _load_worker_subwords(src_path: Path, tgt_path: Path):
    global _worker_subwords
    _worker_subwords = Subwords(src_path, threads=1), Subwords(tgt_path, threads=1)


def encode_chunk(
    pairs: list[tuple[int, str, str]], limits: Limits, dtype: np.dtype, subwords: tuple[Subwords, Subwords] = None
) -> store.EncodedChunk:
    """Pairs (line, source, target) encoded with ``subwords`` (in a worker: its own) and filtered
    (`within_limits`), with the counts of what was dropped."""
    src_sw, tgt_sw = subwords or _worker_subwords
    sources, targets = [p[1] for p in pairs], [p[2] for p in pairs]
    src_ids, tgt_ids = src_sw.encode(sources), tgt_sw.encode(targets)
    keep, counts = within_limits(sources, src_ids, tgt_ids, limits)
    return store.EncodedChunk.of(
        [pairs[i][0] for i in keep],
        [src_ids[i] for i in keep],
        [tgt_ids[i] for i in keep],
        dtype,
        {"encoded": len(pairs), **counts},
    )


@contextmanager
def _encoder(workers: int, src_sw: Subwords, tgt_sw: Subwords):
    """encode(chunks, limits, dtype): the chunks encoded (`encode_chunk`) in their order, in this
    process or by ``workers`` processes, each with at most two chunks waiting (memory stays bounded
    however fast the corpus is read)."""
    if workers == 1:
        yield lambda chunks, limits, dtype: (encode_chunk(c, limits, dtype, (src_sw, tgt_sw)) for c in chunks)
        return
    # spawned, not forked: a fork copies torch's OpenMP threads' locks in whatever state they are
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_load_worker_subwords,
        initargs=(src_sw.path, tgt_sw.path),
    )

    def encode(chunks, limits, dtype):
        waiting = deque()
        try:
            for chunk in chunks:
                waiting.append(pool.submit(encode_chunk, chunk, limits, dtype))
                if len(waiting) >= 2 * workers:
                    yield waiting.popleft().result()
            while waiting:
                yield waiting.popleft().result()
        except BrokenProcessPool:
            raise AttnmtError(
                "a worker process encoding the training corpus died (killed, or out of memory?); "
                "nothing of the store was kept: prepare it again"
            ) from None

    try:
        yield encode
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
