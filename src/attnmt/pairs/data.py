"""Sentence-pair corpora (task: pairs): TSV files of premise, hypothesis and label, read with the
same care as the translation corpora (attnmt.data.corpus): a missing file, bad UTF-8, a line with
too few columns, a column name missing from the header, an empty label or one that would make the
output of ``attnmt classify`` unreadable (see ``label_problem``) is an AttnmtError naming the file
and line; pairs with an empty sentence are dropped with a count in the log. Files are read line by
line (`PairLines`); the training set is never held as text: its labels are gathered in one pass,
its subwords learnt from another, and it is encoded a chunk at a time into flat arrays
(`encode_training_pairs`, `TrainingPairs`); the dev and test sets keep their texts (`read_pairs`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

import yaml

from attnmt.core.config import Config, PairFiles, config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write, atomic_write_text
from attnmt.data.corpus import chunked, stream_lines
from attnmt.data.store import token_dtype
from attnmt.data.subwords import EOS, Subwords, prepared_subwords, subword_paths, train_subwords


@dataclass
class PairCorpus:
    """The pairs of a file held in memory, with their texts: a dev or test set (they are scored)."""

    premises: list[str]
    hypotheses: list[str]
    labels: list[str]
    lines: list[int] = field(default_factory=list)  # each pair's line number in its file, from 1
    dropped_empty: int = 0  # pairs with an empty premise or hypothesis

    def __len__(self):
        return len(self.premises)


class PairLines:
    """The labelled pairs of a TSV file, its columns chosen by ``files``, read line by line:
    iterating yields ``(line, premise, hypothesis, label)`` for each pair with two non-blank
    sentences (``line`` its line number in the file, from 1; the label stripped), counted in
    ``count``, and counts the others in ``dropped_empty`` as they pass; a bad line is an
    AttnmtError naming the file and line when it is reached, a file of no pair one at the end.
    Each iteration reads the file again."""

    def __init__(self, files: PairFiles):
        self.files, self.count, self.dropped_empty = files, 0, 0

    def __iter__(self) -> Iterator[tuple[int, str, str, str]]:
        files, path = self.files, self.files.tsv
        self.count = self.dropped_empty = 0
        lines = enumerate(stream_lines(path), start=1)
        header = None
        if files.has_header:
            _, header = next(lines, (None, None))
            if header is None:
                raise AttnmtError(f"{path}: empty file, expected a header line naming the columns")
        names = ("premise_column", "hypothesis_column", "label_column")
        columns = [_column_index(files, name, header) for name in names]
        needed = max(columns) + 1
        for number, line in lines:
            if not line.strip():
                self.dropped_empty += 1
                continue
            fields = line.split("\t")
            if len(fields) < needed:
                raise AttnmtError(
                    f"{path}: line {number} has {len(fields)} tab-separated column(s), expected at least {needed}"
                )
            premise, hypothesis, label = (fields[c] for c in columns)
            if not label.strip():
                raise AttnmtError(f"{path}: line {number} has an empty label (column {columns[2]})")
            problem = label_problem(label.strip())
            if problem:
                raise AttnmtError(
                    f"{path}: line {number}: the label {label.strip()!r} (column {columns[2]}) cannot be a "
                    f"class name: {problem}"
                )
            if not premise.strip() or not hypothesis.strip():
                self.dropped_empty += 1
                continue
            self.count += 1
            yield number, premise, hypothesis, label.strip()
        if not self.count:
            raise AttnmtError(f"empty corpus: {path} contains no sentence pairs")


def read_pairs(files: PairFiles) -> PairCorpus:
    """The labelled pairs of a TSV file held in memory (`PairLines`): for the dev and test sets,
    whose texts are kept; the training set is read as it is encoded (`encode_training_pairs`)."""
    pairs, corpus = PairLines(files), PairCorpus([], [], [])
    for number, premise, hypothesis, label in pairs:
        corpus.premises.append(premise)
        corpus.hypotheses.append(hypothesis)
        corpus.labels.append(label)
        corpus.lines.append(number)
    corpus.dropped_empty = pairs.dropped_empty
    return corpus


def label_problem(label: str) -> str | None:
    """Why ``label`` cannot be a class name, or None. ``attnmt classify`` writes
    ``LABEL<TAB>LABEL=P LABEL=P ...`` and ``ERROR<TAB>message`` lines: a label with whitespace or '='
    would split differently than it was written, one with a control or format character (the bidi
    overrides U+202A-U+202E and U+2066-U+2069 among them) would display otherwise than it parses,
    and a label ERROR would read as a line that was not classified."""
    if label == "ERROR":
        return "ERROR is what attnmt classify writes for a line it could not classify"
    for char in label:
        if char == "=":
            return "it contains '=', which attnmt classify writes between a label and its probability"
        if char.isspace():
            return f"it contains whitespace (U+{ord(char):04X}), which separates the labels attnmt classify writes"
        if unicodedata.category(char)[0] == "C" or unicodedata.category(char) in ("Zl", "Zp"):
            return (
                f"it contains U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')}), a control, format "
                "(bidi) or unassigned character"
            )
    return None


def check_labels(labels: list[str], where: str):
    """AttnmtError naming ``where`` (a config's data.labels) if a label cannot be a class name."""
    for label in labels:
        problem = label_problem(label)
        if problem:
            raise AttnmtError(f"{where}: the label {label!r} cannot be a class name: {problem}")


def _column_index(files: PairFiles, name: str, header: str | None) -> int:
    column = getattr(files, name)
    if isinstance(column, int):
        return column
    names = [cell.strip() for cell in header.split("\t")]
    if column not in names:
        raise AttnmtError(
            f"{files.tsv}: line 1 (the header) has no column named {column!r} ({name}); its columns: {', '.join(names)}"
        )
    return names.index(column)


@dataclass
class EncodedPairs:
    corpus: PairCorpus
    premise_ids: list[list[int]]  # each ending in EOS: the token a word with no counterpart can attend to
    hypothesis_ids: list[list[int]]
    label_ids: list[int]

    def __len__(self):
        return len(self.premise_ids)

    def sizes(self) -> list[int]:
        """The longer sentence of each pair: its width in a batch."""
        return [max(len(p), len(h)) for p, h in zip(self.premise_ids, self.hypothesis_ids)]


def encode_pairs(
    corpus: PairCorpus,
    subwords: Subwords,
    labels: list[str],
    name: str,
    max_length: int | None = None,
    log: Callable[[str], None] = print,
) -> EncodedPairs:
    """``corpus`` as ids; pairs with a sentence longer than ``max_length`` subwords dropped with a
    count in the log. A label not in ``labels`` is an error naming the line."""
    index = {label: i for i, label in enumerate(labels)}
    for label, line in zip(corpus.labels, corpus.lines):
        if label not in index:
            raise AttnmtError(
                f"{name}: line {line} has the label {label!r}, not one of the model's labels ({', '.join(labels)})"
            )
    premises = [ids + [EOS] for ids in subwords.encode(corpus.premises)]
    hypotheses = [ids + [EOS] for ids in subwords.encode(corpus.hypotheses)]
    keep = range(len(corpus))
    if max_length is not None:
        keep = [i for i in keep if max(len(premises[i]), len(hypotheses[i])) <= max_length + 1]
        if len(keep) < len(corpus):
            log(f"{name}: dropped {len(corpus) - len(keep)} pair(s) longer than {max_length} subwords")
        if not keep:
            raise AttnmtError(f"{name}: no sentence pair is at most {max_length} subwords long; raise data.max_length")
    if corpus.dropped_empty:
        log(f"{name}: dropped {corpus.dropped_empty} pair(s) with an empty sentence")
    kept = PairCorpus(
        *([column[i] for i in keep] for column in (corpus.premises, corpus.hypotheses, corpus.labels, corpus.lines)),
        corpus.dropped_empty,
    )
    return EncodedPairs(
        kept, [premises[i] for i in keep], [hypotheses[i] for i in keep], [index[label] for label in kept.labels]
    )


CHUNK_PAIRS = 2_000  # training pairs encoded at a time
SIZE_BLOCK = 1 << 16  # pairs whose sizes are computed at a time


class FlatIds(Sequence):
    """The ids of one side of the pairs, one flat numpy array: ``ids[i]`` pair i's ids (a list of
    ints, as in EncodedPairs), from ``flat[starts[i]:starts[i + 1]]``."""

    def __init__(self, flat: np.ndarray, starts: np.ndarray):
        self.flat, self.starts = flat, starts

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.flat[self.starts[i] : self.starts[i + 1]].tolist()

    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)


class GrowingArray:
    """A numpy array appended to a block at a time, its buffer grown by half again when full
    (`numpy.ndarray.resize`: a realloc, which for a large buffer moves pages rather than copying
    them, and whose capacity not yet written holds no memory) and cut to its length by ``array()``:
    a flat array built with no second copy of what it holds, nor freed blocks left behind."""

    def __init__(self, dtype: np.dtype, first: int | None = None):
        self.buffer, self.length = np.empty(1024, dtype), 0
        if first is not None:
            self.append(np.array([first], dtype))

    def append(self, values: np.ndarray):
        end = self.length + len(values)
        if end > len(self.buffer):
            self.buffer.resize(max(end, len(self.buffer) * 3 // 2), refcheck=False)
        self.buffer[self.length : end] = values
        self.length = end

    def array(self) -> np.ndarray:
        self.buffer.resize(self.length, refcheck=False)
        return self.buffer


@dataclass
class TrainingPairs:
    """The encoded training pairs, held compactly (no texts, no Python lists): each side's ids,
    ending in EOS, as one flat array of the smallest integer type that holds the vocabulary's ids
    with each pair's start (FlatIds), each pair's class in an array of bytes (of int32 beyond 256
    classes); ``premise_ids[i]`` and ``hypothesis_ids[i]`` are lists of ids, as in EncodedPairs.
    About 4 bytes a piece of a pair's two sentences and 17 bytes a pair."""

    premise_ids: FlatIds
    hypothesis_ids: FlatIds
    label_ids: np.ndarray
    dropped_empty: int = 0

    def __len__(self):
        return len(self.label_ids)

    def sizes(self) -> np.ndarray:
        """The longer sentence of each pair: its width in a batch (EncodedPairs.sizes), in the
        smallest integer type that holds them (2 bytes a pair), computed a block of pairs at a time."""
        premise, hypothesis = self.premise_ids.starts, self.hypothesis_ids.starts
        largest = max(int(np.diff(premise).max(initial=0)), int(np.diff(hypothesis).max(initial=0)))
        sizes = np.empty(len(self), np.uint16 if largest < 1 << 16 else np.int32)
        for k in range(0, len(self), SIZE_BLOCK):
            block = slice(k, k + SIZE_BLOCK + 1)
            sizes[k : k + SIZE_BLOCK] = np.maximum(np.diff(premise[block]), np.diff(hypothesis[block]))
        return sizes


def encode_training_pairs(
    files: PairFiles,
    subwords: Subwords,
    labels: list[str],
    max_length: int | None = None,
    log: Callable[[str], None] = print,
) -> TrainingPairs:
    """The training pairs of ``files`` read line by line (`PairLines`) and encoded CHUNK_PAIRS at a
    time into TrainingPairs: what `encode_pairs` gives of the corpus held in memory, in the same
    order, with the same messages and errors. Pairs with a sentence longer than ``max_length``
    subwords are dropped with a count in the log; a label not in ``labels`` is an error naming its
    line, reported after the file is read to its end (a bad line anywhere in it is reported first,
    as when the file was read whole before it was encoded)."""
    name, index = str(files.tsv), {label: i for i, label in enumerate(labels)}
    dtype = token_dtype(len(subwords))
    label_dtype = np.uint8 if len(labels) <= 1 << 8 else np.int32
    pairs, unknown, long = PairLines(files), None, 0
    sides = [(GrowingArray(dtype), GrowingArray(np.int64, first=0)) for _ in range(2)]  # (ids, starts)
    label_ids = GrowingArray(label_dtype)
    for chunk in chunked(pairs, CHUNK_PAIRS):
        if unknown is None:
            unknown = next(((line, label) for line, _, _, label in chunk if label not in index), None)
        if unknown is not None:
            continue  # (the rest read for its errors alone)
        encoded = [[ids + [EOS] for ids in subwords.encode([pair[side] for pair in chunk])] for side in (1, 2)]
        keep = [
            k
            for k in range(len(chunk))
            if max_length is None or max(len(encoded[0][k]), len(encoded[1][k])) <= max_length + 1
        ]
        long += len(chunk) - len(keep)
        for (flat, starts), ids in zip(sides, encoded):
            lengths = np.array([len(ids[k]) for k in keep], np.int64)
            starts.append(flat.length + np.cumsum(lengths))
            flat.append(np.fromiter((i for k in keep for i in ids[k]), dtype=dtype, count=int(lengths.sum())))
        label_ids.append(np.array([index[chunk[k][3]] for k in keep], label_dtype))
    if unknown is not None:
        raise AttnmtError(
            f"{name}: line {unknown[0]} has the label {unknown[1]!r}, not one of the model's labels "
            f"({', '.join(labels)})"
        )
    if long:
        log(f"{name}: dropped {long} pair(s) longer than {max_length} subwords")
    if not label_ids.length:
        raise AttnmtError(f"{name}: no sentence pair is at most {max_length} subwords long; raise data.max_length")
    if pairs.dropped_empty:
        log(f"{name}: dropped {pairs.dropped_empty} pair(s) with an empty sentence")
    premises, hypotheses = (FlatIds(flat.array(), starts.array()) for flat, starts in sides)
    return TrainingPairs(premises, hypotheses, label_ids.array(), pairs.dropped_empty)


def training_labels(files: PairFiles) -> set[str]:
    """The labels of the pairs of a TSV file, read line by line."""
    return {label for _, _, _, label in PairLines(files)}


def labels_of(config: Config) -> list[str]:
    """The classes: data.labels, or else the labels of the training pairs (one pass over
    data.train), sorted."""
    labels = config.data.labels or sorted(training_labels(config.data.train))
    check_labels(labels, "data.labels")
    if len(labels) < 2:
        raise AttnmtError(
            f"{config.data.train.tsv}: every pair has the label {labels[0]!r}; a classifier needs at least two"
        )
    return labels


def prepare_pairs(config: Config, log: Callable[[str], None] = print, force: bool = False) -> Subwords:
    """The subwords of a pair experiment, one vocabulary for both sentences: those of the
    translation model the embeddings come from (copied into the folder), or else trained on the
    training sentences, read line by line (attnmt.data.subwords.prepared_subwords); the config,
    its data.labels filled in, is written into the folder."""
    if config.data.labels is None:  # written into the folder's config
        config.data.labels = labels_of(config)
    source = config.model.embeddings
    if source is None or source.model is None:
        folder, sub = config.experiment_dir, config.data.subwords
        path, _ = subword_paths(folder, joint=True)

        def train() -> Subwords:
            pairs = PairLines(config.data.train)
            sentences = ((premise, hypothesis) for _, premise, hypothesis, _ in pairs)
            subwords = train_subwords(sentences, sub, folder, config.training.seed)[0]
            sampled = 2 * pairs.count > sub.max_sentences
            log(
                f"trained joint {sub.type} subwords ({sub.vocab_size}) on {pairs.count} pairs"
                + (f" (a sample of {sub.max_sentences:,} sentences)" if sampled else "")
            )
            return subwords

        return prepared_subwords(config, [path], train, lambda: Subwords(path), log, force)
    return _copy_subwords(config, log, force)


def _copy_subwords(config: Config, log, force: bool) -> Subwords:
    """The subwords of model.embeddings.model's ``side``, as the experiment's joint vocabulary."""
    from attnmt.core.config import load_config

    source, folder = config.model.embeddings, config.experiment_dir
    translation = load_config(source.model / "config.yaml", saved=True)
    if translation.task != "translation":
        raise AttnmtError(
            f"model.embeddings.model: {source.model} is not a translation model (task: {translation.task})"
        )
    src_path, tgt_path = subword_paths(source.model, translation.data.subwords.joint)
    origin = src_path if source.side == "src" else tgt_path
    target, _ = subword_paths(folder, joint=True)
    settings = folder / "spm" / "settings.yaml"
    wanted = {"from_model": str(source.model), "side": source.side}
    if target.is_file() and settings.is_file() and not force:
        stored = yaml.safe_load(settings.read_text(encoding="utf-8"))
        if stored != wanted:
            raise AttnmtError(
                f"{target.parent} holds other subwords ({stored}); use 'attnmt prepare --force' to "
                "replace them, or another experiment_dir"
            )
    else:
        if not origin.is_file():
            raise AttnmtError(f"{origin}: no subword model in the translation model folder {source.model}")
        atomic_write(target, origin.read_bytes())
        atomic_write_text(settings, yaml.safe_dump(wanted))
        log(f"subwords of {source.model} ({source.side} side) copied to {target}")
    atomic_write_text(folder / "config.yaml", config_to_yaml(config))
    return Subwords(target)
