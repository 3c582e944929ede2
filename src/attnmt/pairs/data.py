"""Sentence-pair corpora (task: pairs): TSV files of premise, hypothesis and label, read with the
same care as the translation corpora (attnmt.data.corpus): a missing file, bad UTF-8, a line with
too few columns, a column name missing from the header, an empty label or one that would make the
output of ``attnmt classify`` unreadable (see ``label_problem``) is an AttnmtError naming the file
and line; pairs with an empty sentence are dropped with a count in the log.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Callable

import yaml

from attnmt.core.config import Config, PairFiles, config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write, atomic_write_text
from attnmt.data.corpus import read_lines
from attnmt.data.subwords import EOS, Subwords, prepared_subwords, subword_paths, train_subwords


@dataclass
class PairCorpus:
    premises: list[str]
    hypotheses: list[str]
    labels: list[str]
    lines: list[int] = field(default_factory=list)  # each pair's line number in its file, from 1
    dropped_empty: int = 0  # pairs with an empty premise or hypothesis

    def __len__(self):
        return len(self.premises)


def read_pairs(files: PairFiles) -> PairCorpus:
    """The labelled pairs of a TSV file, its columns chosen by ``files``."""
    path, lines = files.tsv, read_lines(files.tsv)
    first = 1 if files.has_header else 0
    if first and not lines:
        raise AttnmtError(f"{path}: empty file, expected a header line naming the columns")
    columns = [
        _column_index(files, name, lines[0] if first else None)
        for name in ("premise_column", "hypothesis_column", "label_column")
    ]
    needed = max(columns) + 1
    corpus = PairCorpus([], [], [])
    for number, line in enumerate(lines[first:], start=first + 1):
        if not line.strip():
            corpus.dropped_empty += 1
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
            corpus.dropped_empty += 1
            continue
        corpus.premises.append(premise)
        corpus.hypotheses.append(hypothesis)
        corpus.labels.append(label.strip())
        corpus.lines.append(number)
    if not corpus.premises:
        raise AttnmtError(f"empty corpus: {path} contains no sentence pairs")
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


def labels_of(config: Config, train: PairCorpus) -> list[str]:
    """The classes: data.labels, or else the labels of the training pairs, sorted."""
    labels = config.data.labels or sorted(set(train.labels))
    check_labels(labels, "data.labels")
    if len(labels) < 2:
        raise AttnmtError(
            f"{config.data.train.tsv}: every pair has the label {labels[0]!r}; a classifier needs at least two"
        )
    return labels


def prepare_pairs(config: Config, log: Callable[[str], None] = print, force: bool = False) -> Subwords:
    """The subwords of a pair experiment, one vocabulary for both sentences: those of the
    translation model the embeddings come from (copied into the folder), or else trained on the
    training sentences (attnmt.data.subwords.prepared_subwords); the config, its data.labels filled
    in, is written into the folder."""
    if config.data.labels is None:  # written into the folder's config
        config.data.labels = labels_of(config, read_pairs(config.data.train))
    source = config.model.embeddings
    if source is None or source.model is None:
        folder, sub = config.experiment_dir, config.data.subwords
        path, _ = subword_paths(folder, joint=True)

        def train() -> Subwords:
            pairs = read_pairs(config.data.train)
            log(f"training joint {sub.type} subwords ({sub.vocab_size}) on {len(pairs.premises)} pairs")
            return train_subwords(zip(pairs.premises, pairs.hypotheses), sub, folder, config.training.seed)[0]

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
