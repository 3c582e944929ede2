"""Dev and test sets held out of the training corpus: ``data.dev: {split: N}`` and
``data.test: {NAME: {split: N}}``.

One corpus in, the sets out: the held-out pairs are a sample of the training pairs (after empty
pairs are dropped), drawn with ``training.seed``, disjoint, and never trained on. They are drawn
once, when the experiment is prepared, and written to the experiment folder:

    splits/held-out.json   the training corpus's path and size, the seed, and the line numbers
                           (counting pairs from 0) of each held-out set
    splits/NAME.tsv        each held-out set as source<TAB>target lines, for `attnmt evaluate`

so that a run reproduces, a resumed one holds out the same pairs, and a changed corpus or
setting is an error rather than a silent new split.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from attnmt.config import Config, CorpusFiles
from attnmt.data.corpus import Corpus
from attnmt.errors import AttnmtError
from attnmt.files import atomic_write_text

FOLDER = "splits"
RECORD = "held-out.json"


def set_path(folder: Path, name: str) -> Path:
    return folder / FOLDER / f"{name}.tsv"


def resolved(files: CorpusFiles, name: str, folder: Path) -> CorpusFiles:
    """``files``, or for a held-out set the TSV file it was written to."""
    return CorpusFiles(tsv=set_path(folder, name)) if files.split is not None else files


def hold_out(config: Config, corpus: Corpus, log=print) -> dict[str, list[int]]:
    """The pairs of ``corpus`` (the training corpus) held out for each set of config.data.held_out,
    drawn now or read back from the experiment folder; the sets' TSV files are written on drawing."""
    sizes = config.data.held_out
    if not sizes:
        return {}
    folder = config.experiment_dir
    wanted = {"train": str(config.data.train.tsv or config.data.train.src), "pairs": len(corpus.sources),
              "seed": config.training.seed, "sizes": sizes}
    record_path = folder / FOLDER / RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if {key: record.get(key) for key in wanted} != wanted:
            raise AttnmtError(f"{record_path}: the held-out sets were drawn from another corpus or with other "
                              f"settings ({ {key: record.get(key) for key in wanted} }, now {wanted}); use another "
                              "experiment_dir")
        return record["sets"]
    if sum(sizes.values()) >= len(corpus.sources):
        raise AttnmtError(f"{wanted['train']}: {len(corpus.sources):,} pairs cannot give "
                          f"{sum(sizes.values()):,} held-out pairs ({sizes}) and still leave some to train on")
    sample = random.Random(config.training.seed).sample(range(len(corpus.sources)), sum(sizes.values()))
    sets, start = {}, 0
    for name, size in sizes.items():
        sets[name] = sorted(sample[start:start + size])
        start += size
        rows = tsv_rows([corpus.sources[i] for i in sets[name]], [corpus.targets[i] for i in sets[name]])
        atomic_write_text(set_path(folder, name), rows)
        log(f"held out {size:,} pairs of {wanted['train']} as the {name} set: {set_path(folder, name)}")
    atomic_write_text(record_path, json.dumps({**wanted, "sets": sets}) + "\n")  # last: the sets are complete
    return sets


def tsv_rows(sources: list[str], targets: list[str]) -> str:
    """Pairs as the lines of a TSV file (a tab inside a sentence of two plain files would add a
    column: it becomes a space)."""
    return "".join(f"{s.replace(chr(9), ' ')}\t{t.replace(chr(9), ' ')}\n" for s, t in zip(sources, targets))


def without(corpus: Corpus, held_out: dict[str, list[int]]) -> Corpus:
    """The training pairs: ``corpus`` less every held-out pair."""
    out = {i for indices in held_out.values() for i in indices}
    keep = [i for i in range(len(corpus.sources)) if i not in out]
    return Corpus([corpus.sources[i] for i in keep], [corpus.targets[i] for i in keep], corpus.dropped_empty)
