"""The runs of a comparison: every variant trained with every seed (and, with both_directions,
target -> source too), on the data prepared once in OUT/shared, in folders of --out.

A run whose results.json exists is not trained again; an unfinished one (a checkpoint without
results) continues with ``resume=True``; a run folder trained with another configuration is an
error, never silently reused. One compare at a time works in an --out folder: it holds a lock on
OUT/compare.lock (``locked``).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnmt.compare.variants import BaseConfig, Variant, merged
from attnmt.core.config import Config, load_config
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_writer
from attnmt.data import splits
from attnmt.data.corpus import read_corpus, read_lines
from attnmt.data.subwords import subword_paths
from attnmt.translation.evaluation import joined
from attnmt.translation.prepare import prepare_subwords, training_lines

LOCK = "compare.lock"


@dataclass(frozen=True)
class ComparisonSettings:
    """How a comparison trains, scores and reports its runs (the options of ``attnmt compare``):
    the budget (steps or minutes, else the config's), seeds per variant, resume, the test sets
    joined k at a time (join), the beam, the gold alignments (align_pairs: their text, appended to
    the training text; align_gold: their links, one_based or not), both_directions (a reversed run
    per run, for symmetrized alignments), the attention threshold of the links, the test sentence
    of the attention figure (example, from 1), and where the messages go (log, progress bars)."""

    steps: int | None = None
    minutes: float | None = None
    seeds: int = 1
    resume: bool = False
    join: tuple[int, ...] = ()
    beam: int | None = None
    align_pairs: str | Path | None = None
    align_gold: str | Path | None = None
    one_based: bool = False
    both_directions: bool = False
    threshold: float = 0.5
    example: int = 1
    log: Callable[[str], None] = print
    progress: bool = False

    def __post_init__(self):
        object.__setattr__(self, "join", tuple(self.join))

    def check(self):
        """Options that only make sense together, or apart."""
        if (self.align_pairs is None) != (self.align_gold is None):
            raise AttnmtError("give --align-pairs (the gold set's text) and --align-gold (its links) together")
        if self.steps is not None and self.minutes is not None:
            raise AttnmtError("give one budget: steps or minutes")

    @property
    def budget(self) -> dict:
        """The training section every run gets: the same budget for all (none: the config's)."""
        if self.steps:
            return {"max_steps": self.steps, "max_minutes": None, "max_epochs": None}
        return {"max_steps": None, "max_minutes": self.minutes, "max_epochs": None} if self.minutes else {}


@dataclass
class Run:
    variant: Variant
    seed: int
    reverse: bool  # trained target -> source (for alignments in both directions)
    config: Config

    @property
    def folder(self) -> Path:
        return self.config.experiment_dir

    @property
    def label(self) -> str:
        return f"{self.variant.name}, seed {self.seed}{', reversed' if self.reverse else ''}"


def swapped(spec: dict) -> dict:
    """A corpus's files with source and target exchanged."""
    if "tsv" in spec:
        return {**spec, "src_column": spec.get("tgt_column", 1), "tgt_column": spec.get("src_column", 0)}
    return {**spec, "src": spec["tgt"], "tgt": spec["src"]}


def read_align_pairs(path) -> tuple[list[str], list[str]]:
    """ "source ||| target" lines (the format of word aligners) -> sources, targets."""
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if line.count("|||") != 1:
            raise AttnmtError(f"{path}: line {number} is not 'source words ||| target words'")
        source, target = line.split("|||")
        sources.append(" ".join(source.split()))
        targets.append(" ".join(target.split()))
    return sources, targets


@contextmanager
def locked(path: Path):
    """Holds an exclusive lock on ``path`` (created if need be, holding the process id): two
    compares in one --out would train the same runs at once and mix their records. The kernel
    drops the lock when the process ends, however it ends."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            by = f" (process {holder})" if holder.isdigit() else ""
            raise AttnmtError(
                f"{path}: another attnmt compare{by} is working in {path.parent}; wait for it to end, "
                "or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The dotted fields whose values differ between two nested mappings."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


class RunFolders:
    """The --out folder of a comparison: the data every run gets (OUT/shared) and the runs' folders,
    trained there one after the other."""

    def __init__(self, base: BaseConfig, variants: list[Variant], out: Path, settings: ComparisonSettings):
        self.base, self.variants, self.out, self.settings = base, variants, out, settings

    # ------------------------------------------------------------ shared data

    @property
    def shared(self) -> Path:
        return self.out / "shared"

    def shared_data(self) -> dict:
        """The corpora every run gets (the data section's train, dev and test), in OUT/shared."""
        config = self.base.with_overrides({"experiment_dir": str(self.shared)})
        if config.data.extra_train and self.settings.both_directions:  # (a reversed run: its pairs turned around)
            raise AttnmtError(
                "--both-directions trains each variant on data.train turned around too, which "
                "data.extra_train's corpora (back-translations, tagged sources) do not go with: remove "
                "data.extra_train from the config, or compare one direction"
            )
        return {
            "train": {"tsv": str(self.shared / "train.tsv")},
            "dev": self._spec(config.data.dev, "dev", config) if config.data.dev else None,
            "test": None,
        }

    def prepare_shared(self, data: dict):
        """Held-out sets, train.tsv and subwords in OUT/shared, once."""
        log, align_pairs = self.settings.log, self.settings.align_pairs
        train_tsv = self.shared / "train.tsv"
        if not train_tsv.is_file():  # (data.train streamed into it, pair by pair)
            extra = None if align_pairs is None else read_align_pairs(align_pairs)  # (the gold set: small)
            with atomic_writer(train_tsv) as out:
                for _, source, target in training_lines(
                    self.base.with_overrides({"experiment_dir": str(self.shared)}), log
                ):
                    out.write(splits.tsv_rows((source,), (target,)))
                if extra is not None:
                    out.write(splits.tsv_rows(*extra))
                    log(f"appended the text of {len(extra[0])} pairs of {align_pairs} to the training text")
        prepare_subwords(self.base.with_overrides({"experiment_dir": str(self.shared)}, data), log)

    @staticmethod
    def _spec(files, name: str, config: Config) -> dict:
        return splits.resolved(files, name, config.experiment_dir).model_dump(mode="json", exclude_none=True)

    def test_sets(self) -> dict[str, tuple[list[str], list[str]]]:
        """name -> (sources, references): the config's test sets, and each joined k at a time ("NAME-xK")."""
        config = self.base.with_overrides({"experiment_dir": str(self.shared)})
        splits.check_held_out(config, self.shared)  # the held-out sets as drawn, their files unchanged
        sets = {}
        for name, files in config.data.test.items():
            corpus = read_corpus(splits.resolved(files, name, self.shared).as_spec())
            sets[name] = (corpus.sources, corpus.targets)
            for k in self.settings.join:
                if k > 1:
                    sets[f"{name}-x{k}"] = joined(corpus.sources, corpus.targets, k)
        return sets

    # ------------------------------------------------------------ runs

    def runs(self, data: dict) -> list[Run]:
        """Every variant with every seed (and reversed, with both_directions), its config checked."""
        base_seed = self.base.config.training.seed
        runs = []
        for variant, k in itertools.product(self.variants, range(self.settings.seeds)):
            for reverse in (False, True) if self.settings.both_directions else (False,):
                seed = base_seed + k
                folder = self.out / variant.folder / f"seed{seed}{'-reverse' if reverse else ''}"
                run_data = (
                    data
                    if not reverse
                    else {**data, "train": swapped(data["train"]), "dev": data["dev"] and swapped(data["dev"])}
                )
                overrides = {"experiment_dir": str(folder), "training": {**self.settings.budget, "seed": seed}}
                try:
                    config = self.base.with_overrides(merged(variant.overrides, overrides), run_data)
                except AttnmtError as e:
                    raise AttnmtError(f"variant {variant.name}: {e}") from None
                runs.append(Run(variant, seed, reverse, config))
        return runs

    def train_run(self, run: Run, number: str):
        """Trains the run unless it has results; an unfinished run continues only with resume."""
        from attnmt.training import train

        log = self.settings.log
        if (run.folder / "last.safetensors").exists():
            self._check_same_config(run)
            if (run.folder / "results.json").is_file():
                log(f"{number} {run.label}: done before ({run.folder / 'results.json'})")
                return
            if not self.settings.resume:
                raise AttnmtError(
                    f"{run.folder}: an unfinished run; pass --resume to continue it (or delete the "
                    "folder to start it again)"
                )
        else:
            self._copy_subwords(run)
        log(f"{number} {run.label}: training in {run.folder}")
        train(run.config, resume=(run.folder / "last.safetensors").exists(), log=log, progress=self.settings.progress)

    def _check_same_config(self, run: Run):
        stored = load_config(run.folder / "config.yaml", saved=True).model_dump(mode="json")
        changed = differences(stored, run.config.model_dump(mode="json"))
        if changed:
            raise AttnmtError(
                f"{run.folder} was trained with another configuration ({', '.join(changed)} "
                f"differ): choose another --out, or delete the folder"
            )

    def _copy_subwords(self, run: Run):
        """The shared subwords (when the variant keeps the config's subword settings); a reversed
        run with separate vocabularies takes them swapped."""
        if run.config.data.subwords != self.base.config.data.subwords:
            self.settings.log(f"{run.label}: its own subwords (other settings than the config's)")
            return
        joint = run.config.data.subwords.joint
        sources, targets = subword_paths(self.shared, joint)
        to_source, to_target = subword_paths(run.folder, joint)
        to_source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(targets if run.reverse else sources, to_source)
        shutil.copyfile(sources if run.reverse else targets, to_target)
        shutil.copyfile(self.shared / "spm" / "settings.yaml", to_source.parent / "settings.yaml")
