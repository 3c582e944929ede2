"""``attnmt compare``: variants of one experiment trained on the same data, subwords and budget, one
after the other, then scored side by side (mean and spread over seeds).

    attnmt compare CONFIG --vary model.attention=none,bahdanau --seeds 2 --steps 2000 --out runs/cmp

Variants come from a grid (``--vary FIELD=V1,V2``, every combination) and/or a list
(``--variant NAME:FIELD=V,FIELD=V`` or ``--variant NAME=OVERRIDES.yaml``, a partial config merged
over CONFIG). Everything a variant sees is prepared once, in ``OUT/shared``:

    shared/train.tsv         the training pairs (data.train less the held-out dev and test pairs),
                             followed by the text of the --align-pairs (never their gold links)
    shared/splits/           the held-out sets of data.dev / data.test: {split: N}
    shared/spm/              the subwords, trained once on train.tsv and copied into every variant
    VARIANT/seedS/           one training (its experiment folder); results.json once scored
    VARIANT/seedS-reverse/   with both_directions: the variant trained target -> source
    results.json, results.md the tables; bleu-by-length.png, attention.png, alignment.png

A run whose results.json exists is not trained again; an unfinished one (a checkpoint without
results) continues with ``resume=True``; a run folder trained with another configuration is an
error, never silently reused. The results files read back (each run's results.json and
alignment.json, eflomal.json) are validated: a file that is not what compare wrote (invalid JSON,
a number that is not finite, a field of the wrong type) is an error naming the file and the field.
One compare at a time works in an --out folder: it holds a lock on OUT/compare.lock.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter

from attnmt.core.config import Config, config_from_dict, load_config
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, read_checked_json
from attnmt.data import splits
from attnmt.data.corpus import read_corpus, read_lines
from attnmt.data.subwords import subword_paths
from attnmt.evaluation import attention_failures, joined, score_translations
from attnmt.translation.prepare import EncodedCorpus, prepare, training_corpus

FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SHARED_DATA_FIELDS = ("experiment_dir", "data.train", "data.dev", "data.test")  # the same for every variant


# ---------------------------------------------------------------- variants


@dataclass
class Variant:
    name: str
    overrides: dict = field(default_factory=dict)  # a partial config, merged over the base

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9._=+-]+", "_", self.name)


def check_name(name: str):
    """A variant's name names its folder in --out: it must be a plain file name."""
    if not name.strip() or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise AttnmtError(f"variant name {name!r}: a variant's name is the name of its folder in --out, so it must be "
                          "a plain file name (not empty, not starting with '.', without '/' or '\\')")


def merged(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, section by section (a value that is not a mapping replaces)."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def assignment(text: str, where: str) -> dict:
    """"model.attention=bahdanau" -> {"model": {"attention": "bahdanau"}} (the value read as YAML)."""
    name, equals, value = text.partition("=")
    if not equals or not FIELD.fullmatch(name.strip()):
        raise AttnmtError(f"{where}: expected FIELD=VALUE (e.g. model.attention=bahdanau), got {text!r}")
    result: Any = _value(value, where)
    for key in reversed(name.strip().split(".")):
        result = {key: result}
    return result


def _value(text: str, where: str):
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        raise AttnmtError(f"{where}: {text!r} is not a value ({e})") from None


def _label(field_name: str, value) -> str:
    return f"{field_name.rsplit('.', 1)[-1]}={json.dumps(value) if not isinstance(value, str) else value}"


def grid(varies: list[str]) -> list[Variant]:
    """Every combination of the values of each ``FIELD=V1,V2,...``."""
    axes = []
    for text in varies:
        name, equals, values = text.partition("=")
        if not equals or not values:
            raise AttnmtError(f"--vary {text}: expected FIELD=V1,V2,...")
        axes.append([(name.strip(), value) for value in values.split(",")])
    variants = []
    for combination in itertools.product(*axes):
        overrides: dict = {}
        for name, value in combination:
            overrides = merged(overrides, assignment(f"{name}={value}", f"--vary {name}"))
        label = ",".join(_label(name, _value(value, name)) for name, value in combination)
        variants.append(Variant(label, overrides))
    return variants


def parse_variant(text: str) -> Variant:
    """``NAME:FIELD=V,FIELD=V`` (values may not hold ",FIELD=") or ``NAME=OVERRIDES.yaml``."""
    name, colon, rest = text.partition(":")
    if colon and "=" not in name:
        overrides: dict = {}
        for part in re.split(r",(?=\s*[A-Za-z_][A-Za-z0-9_.]*=)", rest):
            overrides = merged(overrides, assignment(part, f"--variant {name}"))
        return Variant(name.strip(), overrides)
    name, equals, path = text.partition("=")
    if not equals or not name.strip():
        raise AttnmtError(f"--variant {text}: expected NAME:FIELD=VALUE,... or NAME=OVERRIDES.yaml")
    return Variant(name.strip(), _overrides_file(Path(path)))


def _overrides_file(path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise AttnmtError(f"{path}: cannot read the variant's overrides: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AttnmtError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise AttnmtError(f"{path}: expected a mapping of config sections (a partial config)")
    return raw


def _touched(overrides: dict, prefix: str = "") -> list[str]:
    """The dotted fields an override sets."""
    out = []
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        out += _touched(value, name + ".") if isinstance(value, dict) else [name]
        out += [name] if isinstance(value, dict) and not value else []
    return out


# ---------------------------------------------------------------- runs


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
    """"source ||| target" lines (the format of word aligners) -> sources, targets."""
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if line.count("|||") != 1:
            raise AttnmtError(f"{path}: line {number} is not 'source words ||| target words'")
        source, target = line.split("|||")
        sources.append(" ".join(source.split()))
        targets.append(" ".join(target.split()))
    return sources, targets


class Comparison:
    """The runs of a comparison and their scores; ``run()`` does it all (see ``compare``)."""

    def __init__(self, config: str | Path, variants: list[Variant], out: str | Path, *, steps: int | None = None,
                 minutes: float | None = None, seeds: int = 1, resume: bool = False, join: tuple[int, ...] = (),
                 beam: int | None = None, align_pairs=None, align_gold=None, one_based: bool = False,
                 both_directions: bool = False, threshold: float = 0.5, example: int = 1,
                 log: Callable[[str], None] = print, progress: bool = False):
        if not variants:
            raise AttnmtError("nothing to compare: give variants (--vary FIELD=V1,V2 and/or --variant ...)")
        names = [v.name for v in variants]
        for name in names:
            check_name(name)
        if len(set(names)) < len(names) or len({v.folder for v in variants}) < len(variants):
            raise AttnmtError(f"variant names must differ (as folder names too): {names}")
        if (align_pairs is None) != (align_gold is None):
            raise AttnmtError("give --align-pairs (the gold set's text) and --align-gold (its links) together")
        if steps is not None and minutes is not None:
            raise AttnmtError("give one budget: steps or minutes")
        self.config_path, self.out = Path(config), Path(out).resolve()
        self.base_config = load_config(self.config_path)  # checks the file (and names what is wrong)
        self.base = _overrides_file(self.config_path)  # as written: variants merge over it
        self.variants, self.seeds, self.resume = variants, seeds, resume
        self.budget = ({"max_steps": steps, "max_minutes": None, "max_epochs": None} if steps else
                       {"max_steps": None, "max_minutes": minutes, "max_epochs": None} if minutes else {})
        self.join, self.beam, self.threshold, self.example = tuple(join), beam, threshold, example
        self.align_pairs, self.align_gold, self.one_based = align_pairs, align_gold, one_based
        self.both_directions = both_directions
        self.log, self.progress = log, progress
        if not self.base_config.data.test:
            raise AttnmtError(f"{self.config_path}: no test set to compare on (data.test)")
        for variant in variants:
            shared = [f for f in _touched(variant.overrides) if f.startswith(SHARED_DATA_FIELDS)]
            if shared:
                raise AttnmtError(f"variant {variant.name}: {', '.join(shared)} must be the same for every variant "
                                  "(set them in the config)")

    # ------------------------------------------------------------ shared data

    @property
    def shared(self) -> Path:
        return self.out / "shared"

    def shared_data(self) -> dict:
        """The corpora every run gets (the data section's train, dev and test), in OUT/shared."""
        config = self._config({"experiment_dir": str(self.shared)})
        return {"train": {"tsv": str(self.shared / "train.tsv")},
                "dev": self._spec(config.data.dev, "dev", config) if config.data.dev else None,
                "test": None}

    def prepare_shared(self, data: dict):
        """Held-out sets, train.tsv and subwords in OUT/shared, once."""
        train_tsv = self.shared / "train.tsv"
        if not train_tsv.is_file():
            corpus = training_corpus(self._config({"experiment_dir": str(self.shared)}), self.log)
            sources, targets = corpus.sources, corpus.targets
            if self.align_pairs is not None:
                extra = read_align_pairs(self.align_pairs)
                sources, targets = sources + extra[0], targets + extra[1]
                self.log(f"appended the text of {len(extra[0])} pairs of {self.align_pairs} to the training text")
            atomic_write_text(train_tsv, splits.tsv_rows(sources, targets))
        prepare(self._config({"experiment_dir": str(self.shared)}, data), self.log)

    @staticmethod
    def _spec(files, name: str, config: Config) -> dict:
        return splits.resolved(files, name, config.experiment_dir).model_dump(mode="json", exclude_none=True)

    def test_sets(self) -> dict[str, tuple[list[str], list[str]]]:
        """name -> (sources, references): the config's test sets, and each joined k at a time ("NAME-xK")."""
        config = self._config({"experiment_dir": str(self.shared)})
        splits.check_held_out(config, self.shared)  # the held-out sets as drawn, their files unchanged
        sets = {}
        for name, files in config.data.test.items():
            corpus = read_corpus(splits.resolved(files, name, self.shared).as_spec())
            sets[name] = (corpus.sources, corpus.targets)
            for k in self.join:
                if k > 1:
                    sets[f"{name}-x{k}"] = joined(corpus.sources, corpus.targets, k)
        return sets

    def _config(self, overrides: dict, data: dict | None = None) -> Config:
        """The base config with ``overrides`` merged in and the corpora of ``data`` (train, dev, test) put in."""
        raw = merged(self.base, overrides)
        if data is not None:
            raw["data"] = {**raw["data"], **data}
        return config_from_dict(raw, self.config_path.resolve().parent, str(self.config_path))

    # ------------------------------------------------------------ runs

    def runs(self, data: dict) -> list[Run]:
        base_seed = self.base_config.training.seed
        runs = []
        for variant, k in itertools.product(self.variants, range(self.seeds)):
            for reverse in (False, True) if self.both_directions else (False,):
                seed = base_seed + k
                folder = self.out / variant.folder / f"seed{seed}{'-reverse' if reverse else ''}"
                run_data = data if not reverse else {**data, "train": swapped(data["train"]),
                                                     "dev": data["dev"] and swapped(data["dev"])}
                overrides = {"experiment_dir": str(folder), "training": {**self.budget, "seed": seed}}
                try:
                    config = self._config(merged(variant.overrides, overrides), run_data)
                except AttnmtError as e:
                    raise AttnmtError(f"variant {variant.name}: {e}") from None
                runs.append(Run(variant, seed, reverse, config))
        return runs

    def train_run(self, run: Run, number: str):
        """Trains the run unless it has results; an unfinished run continues only with resume."""
        from attnmt.training import train

        if (run.folder / "last.safetensors").exists():
            self._check_same_config(run)
            if (run.folder / "results.json").is_file():
                self.log(f"{number} {run.label}: done before ({run.folder / 'results.json'})")
                return
            if not self.resume:
                raise AttnmtError(f"{run.folder}: an unfinished run; pass --resume to continue it (or delete the "
                                  "folder to start it again)")
        else:
            self._copy_subwords(run)
        self.log(f"{number} {run.label}: training in {run.folder}")
        train(run.config, resume=(run.folder / "last.safetensors").exists(), log=self.log, progress=self.progress)

    def _check_same_config(self, run: Run):
        stored = load_config(run.folder / "config.yaml").model_dump(mode="json")
        differences = _differences(stored, run.config.model_dump(mode="json"))
        if differences:
            raise AttnmtError(f"{run.folder} was trained with another configuration ({', '.join(differences)} "
                              f"differ): choose another --out, or delete the folder")

    def _copy_subwords(self, run: Run):
        """The shared subwords (when the variant keeps the config's subword settings); a reversed
        run with separate vocabularies takes them swapped."""
        if run.config.data.subwords != self.base_config.data.subwords:
            self.log(f"{run.label}: its own subwords (other settings than the config's)")
            return
        joint = run.config.data.subwords.joint
        sources, targets = subword_paths(self.shared, joint)
        to_source, to_target = subword_paths(run.folder, joint)
        to_source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(targets if run.reverse else sources, to_source)
        shutil.copyfile(sources if run.reverse else targets, to_target)
        shutil.copyfile(self.shared / "spm" / "settings.yaml", to_source.parent / "settings.yaml")

    # ------------------------------------------------------------ scores

    def score_run(self, run: Run, test_sets: dict) -> dict:
        """results.json of a trained run: its training (steps, minutes, speed) and, for a forward
        run, each test set's BLEU, chrF, BLEU by length, perplexity and attention failures."""
        from attnmt.api import load

        path = run.folder / "results.json"
        if path.is_file():
            return checked_run_record(path, run)
        translator = load(run.folder)
        record = {"variant": run.variant.name, "seed": run.seed, "reverse": run.reverse, **training_record(run.folder)}
        if not run.reverse:
            record["tests"] = {name: self.score_test_set(translator, name, *pair) for name, pair in test_sets.items()}
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")
        return record

    def score_test_set(self, translator, name: str, sources: list[str], references: list[str]) -> dict:
        from attnmt.translation.align import word_matrix
        from attnmt.translation.training import evaluate_loss

        report, translations = score_translations(translator, name, sources, references, beam=self.beam, log=self.log)
        hypotheses = report.pop("hypotheses")
        atomic_write_text(translator.folder / f"{name}.hyp", "".join(h + "\n" for h in hypotheses))
        encoded = EncodedCorpus(sources, references, translator.src_subwords.encode(sources),
                                translator.tgt_subwords.encode(references))
        report["perplexity"] = evaluate_loss(translator.model, encoded, translator.config.data.batch_size)["perplexity"]
        matrices = [None if t.attention is None else word_matrix(t.attention, t.source_tokens, t.tokens)
                    for t in translations]
        report["failures"] = attention_failures(matrices, hypotheses, references)
        return report

    def score_alignments(self, forward: Run, backward: Run | None) -> dict | None:
        """AER, precision and recall of the attention's links on the gold set (alignment.json of
        the forward run), or None for a model without attention."""
        from attnmt.api import load

        path = forward.folder / "alignment.json"
        if path.is_file():
            return read_results(path, ALIGNMENT_ROWS)
        model = load(forward.folder)
        if not model.model.has_attention:
            return None
        reverse = load(backward.folder) if backward is not None else None
        scores = attention_alignment_scores(model, reverse, *read_align_pairs(self.align_pairs), self._gold(),
                                            self.threshold)
        atomic_write_text(path, json.dumps(scores, indent=1) + "\n")
        return scores

    def _gold(self):
        from attnmt.translation.align import read_gold

        return read_gold(self.align_gold, self.one_based)

    def score_statistical(self) -> dict:
        """The statistical aligner (eflomal models 1-3) on exactly the training text of the runs:
        scores of its links of the gold pairs (appended last)."""
        from attnmt.translation.align import symmetrized_scores
        from attnmt.translation.statistical_align import eflomal_links

        path = self.out / "eflomal.json"
        if path.is_file():
            return read_results(path, STATISTICAL_SCORES)
        corpus = read_corpus({"tsv": self.shared / "train.tsv"})
        sure, possible = self._gold()
        start = len(corpus.sources) - len(sure)
        scores = {}
        for model, name in ((1, "eflomal IBM1"), (2, "eflomal HMM"), (3, "eflomal HMM+fertility")):
            self.log(f"statistical aligner: {name} on {len(corpus.sources):,} pairs")
            forward, backward = eflomal_links(corpus.sources, corpus.targets, model)
            scores[name] = symmetrized_scores(forward[start:], backward[start:], sure, possible)
        atomic_write_text(path, json.dumps(scores, indent=1) + "\n")
        return scores

    # ------------------------------------------------------------ all of it

    def run(self) -> dict:
        data = self.shared_data()
        runs = self.runs(data)  # every variant's config checked before anything is trained
        self.out.mkdir(parents=True, exist_ok=True)
        with locked(self.out / LOCK):
            return self._run(runs, data)

    def _run(self, runs: list[Run], data: dict) -> dict:
        self.prepare_shared(data)
        test_sets = self.test_sets()
        records = []
        for number, run in enumerate(runs, start=1):
            self.train_run(run, f"[{number}/{len(runs)}]")
            records.append(self.score_run(run, test_sets))
        alignments, statistical = {}, {}
        if self.align_gold is not None:
            for forward in (r for r in runs if not r.reverse):
                backward = next((r for r in runs if r.reverse and r.variant is forward.variant
                                 and r.seed == forward.seed), None)
                alignments[(forward.variant.name, forward.seed)] = self.score_alignments(forward, backward)
            statistical = self.score_statistical()
        table = summarize(records, alignments, statistical, [v.name for v in self.variants], list(test_sets))
        table["budget"] = self.budget
        atomic_write_text(self.out / "results.json", json.dumps(table, indent=1) + "\n")
        atomic_write_text(self.out / "results.md", results_markdown(table))
        self.draw(table, runs, test_sets)
        self.log(f"results: {self.out / 'results.md'}")
        return table

    def draw(self, table: dict, runs: list[Run], test_sets: dict):
        from attnmt.api import load
        from attnmt.viz import compare as figures
        from attnmt.viz.figures import save

        save(figures.bleu_by_length_figure(table), self.out / "bleu-by-length.png")
        name = next(iter(test_sets))
        if not 1 <= self.example <= len(test_sets[name][0]):
            raise AttnmtError(f"--example {self.example}: test set {name} has {len(test_sets[name][0])} sentences")
        source, reference = test_sets[name][0][self.example - 1], test_sets[name][1][self.example - 1]
        first = {run.variant.name: run for run in reversed(runs) if not run.reverse}
        panels = [(variant, example_attention(load(first[variant].folder), source, reference))
                  for variant in table["variants"]]
        save(figures.attention_panels_figure(panels, source.split(), reference.split()), self.out / "attention.png")
        if table.get("alignment"):
            save(figures.alignment_figure(table), self.out / "alignment.png")


def compare(config: str | Path, out: str | Path, varies: list[str] = (), variants: list[str | Variant] = (),
            **options) -> dict:
    """Python API of ``attnmt compare``: the grid of ``varies`` ("FIELD=V1,V2") and the listed
    ``variants`` ("NAME:FIELD=V,..." , "NAME=OVERRIDES.yaml" or Variant objects), trained and scored;
    returns the table (as results.json). Options: steps, minutes, seeds, resume, join, beam,
    align_pairs, align_gold, one_based, both_directions, threshold, example, log, progress."""
    listed = [v if isinstance(v, Variant) else parse_variant(v) for v in variants]
    return Comparison(config, grid(list(varies)) + listed if varies else listed, out, **options).run()


LOCK = "compare.lock"


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
            raise AttnmtError(f"{path}: another attnmt compare{by} is working in {path.parent}; wait for it to end, "
                              "or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # (releases the lock)


# ---------------------------------------------------------------- results read back


class _Strict(BaseModel):
    # strict: no "12" for 12 or true for 1; allow_inf_nan=False: 1e999 and NaN are refused too.
    # Fields written by other versions are ignored (and left out of the tables).
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore")


class _Metric(_Strict):
    score: float
    signature: str
    detail: str


class _Bucket(_Strict):
    low: int
    high: int | None
    sentences: int
    bleu: float | None


class _Failures(_Strict):
    sentences: int
    source_words: int | None
    unattended: int | None
    over_attended: int | None
    too_long: int
    too_short: int


class _TestReport(_Strict):
    bleu: _Metric
    chrf: _Metric
    sentences: int
    by_length: list[_Bucket]
    beam: int
    perplexity: float | None = None
    failures: _Failures | None = None


class RunRecord(_Strict):
    """A run's results.json."""

    variant: str
    seed: int
    reverse: bool
    steps: int
    minutes: float
    target_tokens_per_s: float | None
    sentences_per_s: float | None
    tests: dict[str, _TestReport] = {}


class _LinkScores(_Strict):
    aer: float
    precision: float
    recall: float
    sentences: int


class _AlignmentRow(_Strict):
    attention: str
    shift: bool
    links: str
    scores: dict[str, _LinkScores]


ALIGNMENT_ROWS = TypeAdapter(list[_AlignmentRow])  # a forward run's alignment.json
STATISTICAL_SCORES = TypeAdapter(dict[str, dict[str, _LinkScores]])  # eflomal.json


def read_results(path: Path, schema: TypeAdapter):
    """A results file as ``schema`` describes it (plain dicts and lists), or AttnmtError naming the
    file and the field: a file edited by hand must not make the tables wrong without a word."""
    value = read_checked_json(path, schema.validate_json, "the results",
                              "not the file compare wrote: delete it to score the run again")
    return schema.dump_python(value)


def checked_run_record(path: Path, run: Run) -> dict:
    """A run's results.json, checked, and of that run."""
    record = read_results(path, TypeAdapter(RunRecord))
    wanted = {"variant": run.variant.name, "seed": run.seed, "reverse": run.reverse}
    for key, value in wanted.items():
        if record[key] != value:
            raise AttnmtError(f"{path}: {key}: {record[key]!r}, but the run in this folder has {value!r}; not the file "
                              "compare wrote: delete it to score the run again")
    return record


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def training_record(folder: Path) -> dict:
    """Steps, minutes and speed of a finished training, from its checkpoint and metrics.jsonl."""
    from attnmt.core.checkpoint import read_trainer_state
    from attnmt.viz.figures import read_metrics

    state = read_trainer_state(folder / "last.safetensors")
    speeds = [r["tokens_per_s"] for r in read_metrics(folder / "metrics.jsonl") if r.get("type") == "train"]
    tokens_per_s = statistics.median(speeds) if speeds else None
    return {"steps": state["step"], "minutes": state["seconds"] / 60, "target_tokens_per_s": tokens_per_s,
            "sentences_per_s": tokens_per_s and tokens_per_s * state["sentences"] / max(state["target_tokens"], 1)}


def example_attention(translator, source: str, reference: str):
    """Word attention of the model forced to write the reference (None without attention)."""
    from attnmt.translation.align import force_attention, word_attention

    if not translator.model.has_attention:
        return None
    matrices = force_attention(translator, [source], [reference])
    return word_attention(translator, [source], [reference], matrices)[0]


def attention_alignment_scores(forward, backward, sources: list[str], targets: list[str], gold,
                               threshold: float) -> list[dict]:
    """Scores of the attention's word alignments of the gold pairs, every way of reading them:
    which attention (the model's, or each Transformer layer's averaged over heads), shifted by one
    step or not, argmax or threshold links; then each direction and symmetrization."""
    from attnmt.translation.align import alignments_from_attention, symmetrized_scores, transposed, word_attention

    rows = []
    for name, forward_matrices, backward_matrices in _attention_sources(forward, backward, sources, targets):
        for shift in (False, True):
            fw = word_attention(forward, sources, targets, forward_matrices, shift=shift)
            bw = backward and word_attention(backward, targets, sources, backward_matrices, shift=shift)
            for links in ("argmax", "threshold"):
                f = [alignments_from_attention(m, links, threshold) for m in fw]
                b = bw and [transposed(alignments_from_attention(m, links, threshold)) for m in bw]
                rows.append({"attention": name, "shift": shift, "links": links,
                             "scores": symmetrized_scores(f, b, *gold)})
    return rows


def _attention_sources(forward, backward, sources, targets):
    """(name, forward matrices, backward matrices or None) of each attention to read alignments from."""
    from attnmt.translation.align import force_attention

    layered = forward.config.model.type == "transformer"
    f = force_attention(forward, sources, targets, layers=layered)
    b = backward and force_attention(backward, targets, sources, layers=layered)
    if not layered:
        return [("attention", f, b)]
    return [(f"layer {k + 1}", [m[k] for m in f], b and [m[k] for m in b]) for k in range(f[0].shape[0])]


# ---------------------------------------------------------------- tables


def flat(record: dict, prefix: str = "") -> dict[str, float]:
    """Nested numbers as {"a/b/c": value} (lists of buckets by their label)."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, name + "/"))
        elif key == "by_length":  # BLEU and sentences of each non-empty bucket
            out.update({f"{name}/{bucket_label(b)}": b["bleu"] for b in value if b["sentences"]})
            out.update({f"{prefix}bucket_sentences/{bucket_label(b)}": b["sentences"] for b in value if b["sentences"]})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def bucket_label(bucket: dict) -> str:
    return f"{bucket['low']}+" if bucket["high"] is None else f"{bucket['low']}-{bucket['high'] - 1}"


def spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def summarize(records: list[dict], alignments: dict, statistical: dict, variants: list[str],
              test_names: list[str]) -> dict:
    """Per variant, every number of its runs as mean, standard deviation and values over the seeds."""
    table = {"variants": variants, "test_sets": test_names, "metrics": {}, "alignment": {}, "statistical": statistical}
    for variant in variants:
        forward = [flat(r) for r in records if r["variant"] == variant and not r["reverse"]]
        keys = sorted(set().union(*forward)) if forward else []
        table["metrics"][variant] = {key: spread([f[key] for f in forward if key in f]) for key in keys}
        seeds = [rows for (name, _), rows in alignments.items() if name == variant and rows]
        if seeds:
            table["alignment"][variant] = [_alignment_row([rows[i] for rows in seeds]) for i in range(len(seeds[0]))]
    return table


def _alignment_row(seeds: list[dict]) -> dict:
    """One way of reading alignments (the same row of every seed's scores), its scores as spreads."""
    row = {key: seeds[0][key] for key in ("attention", "shift", "links")}
    row["scores"] = {method: {m: spread([seed["scores"][method][m] for seed in seeds])
                              for m in ("aer", "precision", "recall")} for method in seeds[0]["scores"]}
    return row


def _cell(metric: dict | None, digits: int = 1) -> str:
    if metric is None:
        return "-"
    if len(metric["values"]) > 1:
        return f"{metric['mean']:.{digits}f} ± {metric['sd']:.{digits}f}"
    return f"{metric['mean']:.{digits}f}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def results_markdown(table: dict) -> str:
    """The tables of results.json as Markdown: translation, BLEU by length, failures, alignment."""
    metrics, tests = table["metrics"], table["test_sets"]
    first = tests[0]
    parts = ["## Translation\n\nMean ± standard deviation over the seeds. Perplexity per target subword; "
             "speed in the training run (target tokens and sentences per second, validation excluded).\n",
             _markdown(["variant", *[f"BLEU {t}" for t in tests], f"chrF {first}", f"perplexity {first}",
                        "sentences/s", "steps", "minutes"],
                       [[v, *[_cell(m.get(f"tests/{t}/bleu/score")) for t in tests],
                         _cell(m.get(f"tests/{first}/chrf/score")), _cell(m.get(f"tests/{first}/perplexity"), 2),
                         _cell(m.get("sentences_per_s"), 0), _cell(m.get("steps"), 0), _cell(m.get("minutes"))]
                        for v, m in metrics.items()])]
    for test in tests:
        prefix = f"tests/{test}/by_length/"
        labels = sorted({k[len(prefix):] for m in metrics.values() for k in m if k.startswith(prefix)},
                        key=lambda label: int(label.split("-")[0].rstrip("+")))
        sizes = {label: _bucket_sizes(metrics, test, label) for label in labels}
        parts.append(f"## BLEU by source length: {test}\n\nSource words (sentences).\n")
        parts.append(_markdown(["variant", *[f"{label} ({sizes[label]})" for label in labels]],
                               [[v, *[_cell(m.get(prefix + label)) for label in labels]] for v, m in metrics.items()]))
    parts.append("## Attention failures\n\nSource words whose attention summed over the output is < 0.2 "
                 "(unattended) or > 3 (over-attended), per 100 source words; outputs more than twice (too long) "
                 "or less than half (too short) as long as their reference, in sentences.\n")
    parts.append(_markdown(["variant", "test set", "unattended %", "over-attended %", "too long", "too short"],
                           [[v, t, *_failure_cells(m, t)] for v, m in metrics.items() for t in tests]))
    if table["alignment"] or table["statistical"]:
        parts.append(alignment_markdown(table))
    return "\n".join(parts)


def _bucket_sizes(metrics: dict, test: str, label: str) -> str:
    """Sentences in the bucket (the same test set for every variant)."""
    counts = [m[f"tests/{test}/bucket_sentences/{label}"]["mean"] for m in metrics.values()
              if f"tests/{test}/bucket_sentences/{label}" in m]
    return f"{counts[0]:.0f}" if counts else "?"


def _failure_cells(m: dict, test: str) -> list[str]:
    words = m.get(f"tests/{test}/failures/source_words")
    cells = []
    for kind in ("unattended", "over_attended"):
        count = m.get(f"tests/{test}/failures/{kind}")
        cells.append("-" if not words or not words["mean"] else f"{100 * count['mean'] / words['mean']:.1f}")
    return cells + [_cell(m.get(f"tests/{test}/failures/{kind}"), 1) for kind in ("too_long", "too_short")]


ALIGNMENT_COLUMNS = ("forward", "backward", "intersection", "union", "grow-diag-final")


def alignment_markdown(table: dict) -> str:
    rows = []
    for variant, variant_rows in table["alignment"].items():
        for row in variant_rows:
            how = f"{row['attention']}{', shifted' if row['shift'] else ''}, {row['links']}"
            rows.append([variant, how, *[_cell(_aer(row["scores"].get(c)), 1) for c in ALIGNMENT_COLUMNS]])
    for name, scores in table["statistical"].items():
        rows.append([name, "Gibbs sampling", *[_cell(_aer(spread_of(scores.get(c))), 1) for c in ALIGNMENT_COLUMNS]])
    return ("## Word alignment\n\nAER (%) on the gold set, lower is better; precision and recall in "
            "results.json.\n\n" + _markdown(["aligner", "links", *ALIGNMENT_COLUMNS], rows))


def spread_of(scores: dict | None) -> dict | None:
    """One run's scores as spreads (of one value)."""
    return None if scores is None else {m: spread([scores[m]]) for m in ("aer", "precision", "recall")}


def _aer(scores: dict | None) -> dict | None:
    if scores is None:
        return None
    aer = scores["aer"]
    return {"mean": 100 * aer["mean"], "sd": 100 * aer["sd"], "values": aer["values"]}
