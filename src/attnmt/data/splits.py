"""Dev and test sets held out of the training corpus: ``data.dev: {split: N}`` and
``data.test: {NAME: {split: N}}``.

One corpus in, the sets out: the held-out pairs are a sample of the training pairs (after empty
pairs are dropped), drawn with ``training.seed``, disjoint, and never trained on. They are drawn
once, when the experiment is prepared, and written to the experiment folder:

    splits/held-out.json   the training corpus's path and size, the seed, the line numbers
                           (counting pairs from 0) of each held-out set, and the SHA-256 of each
                           set's TSV file
    splits/NAME.tsv        each held-out set as source<TAB>target lines, for `attnmt evaluate`

so that a run reproduces, a resumed one holds out the same pairs, and a changed corpus or
setting is an error rather than a silent new split. The record is checked whenever it is read
(``train --resume``, ``attnmt evaluate``): the line numbers must be those the seed draws from a
corpus of that size, so an edited record (pairs moved, sets overlapping or out of range) is an
error naming the file, never pairs trained on and scored as held out. Records written before the
TSV files' checksums existed carry none and are checked by the line numbers alone.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from attnmt.core.config import Config, CorpusFiles
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, read_checked_json
from attnmt.core.folders import inside_folder
from attnmt.data.corpus import Corpus, CorpusPairs

FOLDER = "splits"
RECORD = "held-out.json"


def set_path(folder: Path, name: str) -> Path:
    return folder / FOLDER / f"{name}.tsv"


def resolved(files: CorpusFiles, name: str, folder: Path) -> CorpusFiles:
    """``files``, or for a held-out set the TSV file it was written to."""
    return CorpusFiles(tsv=set_path(folder, name)) if files.split is not None else files


def hold_out(config: Config, log=print, pairs: int | None = None) -> dict[str, list[int]]:
    """The pairs of the training corpus (data.train, counting its non-blank pairs from 0) held out
    for each set of config.data.held_out, drawn now or read back from the experiment folder; the
    sets' TSV files are written on drawing. The corpus is read line by line: once to count its
    pairs, unless the caller knows how many there are (``pairs``: a prepared store records it), and
    once more on drawing, for the texts of the held-out pairs."""
    sizes = config.data.held_out
    if not sizes:
        return {}
    folder = config.experiment_dir
    corpus = CorpusPairs(config.data.train.as_spec())
    if pairs is None:
        pairs = sum(1 for _ in corpus)
    if pairs == 0:
        raise corpus.empty_error()
    wanted = {
        "train": str(config.data.train.tsv or config.data.train.src),
        "pairs": pairs,
        "seed": config.training.seed,
        "sizes": sizes,
    }
    record_path = folder / FOLDER / RECORD
    if record_path.is_file():
        record = checked_record(folder)
        stored = {key: getattr(record, key) for key in wanted}
        if stored != wanted:
            raise AttnmtError(
                f"{record_path}: the held-out sets were drawn from another corpus or with other "
                f"settings ({stored}, now {wanted}); use another experiment_dir"
            )
        return record.sets
    if sum(sizes.values()) >= pairs:
        raise AttnmtError(
            f"{wanted['train']}: {pairs:,} pairs cannot give "
            f"{sum(sizes.values()):,} held-out pairs ({sizes}) and still leave some to train on"
        )
    sets, files = drawn(pairs, config.training.seed, sizes), {}
    set_of = {k: name for name, indices in sets.items() for k in indices}
    texts = {name: ([], []) for name in sets}
    for k, (_, source, target) in enumerate(corpus):  # (each set's pairs in the order of their lines)
        if k in set_of:
            texts[set_of[k]][0].append(source)
            texts[set_of[k]][1].append(target)
    for name, indices in sets.items():
        rows = tsv_rows(*texts[name])
        atomic_write_text(set_path(folder, name), rows)
        files[name] = sha256(rows.encode("utf-8"))
        log(f"held out {len(indices):,} pairs of {wanted['train']} as the {name} set: {set_path(folder, name)}")
    record = {**wanted, "sets": sets, "files": files}
    atomic_write_text(record_path, json.dumps(record) + "\n")  # last: the sets are complete
    return sets


def drawn(pairs: int, seed: int, sizes: dict[str, int]) -> dict[str, list[int]]:
    """The line numbers of each held-out set, as ``seed`` draws them from ``pairs`` pairs (the
    sets in the order of ``sizes``, disjoint, each sorted)."""
    sample = random.Random(seed).sample(range(pairs), sum(sizes.values()))
    sets, start = {}, 0
    for name, size in sizes.items():
        sets[name] = sorted(sample[start : start + size])
        start += size
    return sets


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HeldOutRecord(BaseModel):
    """splits/held-out.json, as hold_out writes it."""

    model_config = ConfigDict(strict=True, extra="forbid")

    train: str
    pairs: int
    seed: int
    sizes: dict[str, int]
    sets: dict[str, list[int]]
    files: dict[str, str] | None = None  # SHA-256 of each splits/NAME.tsv; None in records written before


def checked_record(folder: Path) -> HeldOutRecord:
    """The held-out record of an experiment (or model) folder, its sets checked against the draw of
    its seed and against their TSV files; AttnmtError naming the file and what is wrong otherwise.
    No corpus is needed: the record holds its size, and the seed draws the sets."""
    path = inside_folder(folder, folder / FOLDER / RECORD)
    record = read_checked_json(path, HeldOutRecord.model_validate_json, "the record of the held-out sets", BENT)
    if set(record.sets) != set(record.sizes):
        raise AttnmtError(
            f"{path}: sets ({', '.join(record.sets) or 'none'}) and sizes "
            f"({', '.join(record.sizes) or 'none'}) name different sets; {BENT}"
        )
    for name, indices in record.sets.items():
        _check_indices(path, name, indices, record)
    if record.sets != drawn(record.pairs, record.seed, record.sizes):
        raise AttnmtError(
            f"{path}: the line numbers of the held-out sets are not those seed {record.seed} draws "
            f"from {record.pairs:,} pairs; {BENT}"
        )
    for name, digest in (record.files or {}).items():
        _check_file(path, inside_folder(folder, set_path(folder, name)), digest)
    return record


BENT = "the file was changed after the sets were drawn: put it back as it was, or start in another experiment_dir"


def _check_indices(path: Path, name: str, indices: list[int], record: HeldOutRecord):
    """Each set's line numbers: as many as its size, within the corpus, no pair twice (the exact
    draw is checked after, but these say what is wrong)."""
    where = f"{path}: sets.{name}"
    if len(indices) != record.sizes[name]:
        raise AttnmtError(f"{where}: {len(indices):,} line numbers for a set of {record.sizes[name]:,}; {BENT}")
    outside = [i for i in indices if not 0 <= i < record.pairs]
    if outside:
        raise AttnmtError(
            f"{where}: line number {outside[0]} is outside the corpus's {record.pairs:,} pairs "
            f"(0 to {record.pairs - 1:,}); {BENT}"
        )
    if len(set(indices)) < len(indices):
        raise AttnmtError(f"{where}: a line number appears twice; {BENT}")
    others = {i for other, lines in record.sets.items() if other != name for i in lines}
    shared = sorted(others.intersection(indices))
    if shared:
        raise AttnmtError(f"{where}: line number {shared[0]} is in another set too; {BENT}")


def _check_file(record_path: Path, tsv: Path, digest: str):
    try:
        data = tsv.read_bytes()
    except OSError as e:
        raise AttnmtError(
            f"{tsv}: cannot read the held-out set ({e.strerror or e}), listed in {record_path}; "
            "start in another experiment_dir"
        ) from None
    if sha256(data) != digest:
        raise AttnmtError(
            f"{tsv}: the held-out set was changed after it was drawn (its SHA-256 differs from "
            f"the one in {record_path}): put it back as it was, or start in another experiment_dir"
        )


def check_held_out(config: Config, folder: Path):
    """The held-out record of a model folder checked, if its config holds sets out of data.train
    (``attnmt evaluate``: the sets scored must be those never trained on)."""
    if config.data.held_out:
        record = checked_record(folder)
        stored, wanted = (record.seed, record.sizes), (config.training.seed, config.data.held_out)
        if stored != wanted:
            raise AttnmtError(
                f"{folder / FOLDER / RECORD}: sets {record.sizes} drawn with seed {record.seed}, but "
                f"the config asks for {config.data.held_out} with seed {config.training.seed}; {BENT}"
            )


def tsv_rows(sources: list[str], targets: list[str]) -> str:
    """Pairs as the lines of a TSV file (a tab inside a sentence of two plain files would add a
    column: it becomes a space)."""
    return "".join(f"{s.replace(chr(9), ' ')}\t{t.replace(chr(9), ' ')}\n" for s, t in zip(sources, targets))


def without(corpus: Corpus, held_out: dict[str, list[int]]) -> Corpus:
    """The training pairs: ``corpus`` less every held-out pair."""
    out = {i for indices in held_out.values() for i in indices}
    keep = [i for i in range(len(corpus.sources)) if i not in out]
    return Corpus(
        [corpus.sources[i] for i in keep],
        [corpus.targets[i] for i in keep],
        corpus.dropped_empty,
        None if corpus.lines is None else [corpus.lines[i] for i in keep],
    )
