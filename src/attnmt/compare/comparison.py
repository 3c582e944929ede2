"""A comparison from start to end: its variants checked, their runs trained one after the other
under the lock of --out, scored, summed up in tables and drawn (``Comparison.run``); ``compare``
is its Python API, the one ``attnmt compare`` calls."""

from __future__ import annotations

import json
from pathlib import Path

from attnmt.compare.figures import draw_figures
from attnmt.compare.runs import LOCK, ComparisonSettings, Run, RunFolders, locked
from attnmt.compare.scores import score_alignments, score_run, score_statistical
from attnmt.compare.tables import results_markdown, summarize
from attnmt.compare.variants import BaseConfig, Variant, check_shared_fields, check_variants, grid, parse_variant
from attnmt.core.files import atomic_write_text


class Comparison:
    """The runs of a comparison and their scores; ``run()`` does it all (see ``compare``)."""

    def __init__(
        self, config: str | Path, variants: list[Variant], out: str | Path, settings: ComparisonSettings | None = None
    ):
        settings = ComparisonSettings() if settings is None else settings
        check_variants(variants)
        settings.check()
        self.out = Path(out).resolve()
        self.base = BaseConfig(config)  # checks the file (and names what is wrong)
        self.variants, self.settings = variants, settings
        check_shared_fields(variants)
        self.folders = RunFolders(self.base, variants, self.out, settings)

    def run(self) -> dict:
        data = self.folders.shared_data()
        runs = self.folders.runs(data)  # every variant's config checked before anything is trained
        self.out.mkdir(parents=True, exist_ok=True)
        with locked(self.out / LOCK):
            return self._run(runs, data)

    def _run(self, runs: list[Run], data: dict) -> dict:
        self.folders.prepare_shared(data)
        test_sets = self.folders.test_sets()
        records = []
        for number, run in enumerate(runs, start=1):
            self.folders.train_run(run, f"[{number}/{len(runs)}]")
            records.append(score_run(run, test_sets, self.settings))
        alignments, statistical = self._alignment_scores(runs) if self.settings.align_gold is not None else ({}, {})
        table = summarize(records, alignments, statistical, [v.name for v in self.variants], list(test_sets))
        table["budget"] = self.settings.budget
        atomic_write_text(self.out / "results.json", json.dumps(table, indent=1) + "\n")
        atomic_write_text(self.out / "results.md", results_markdown(table))
        draw_figures(table, runs, test_sets, self.settings.example, self.out)
        self.settings.log(f"results: {self.out / 'results.md'}")
        return table

    def _alignment_scores(self, runs: list[Run]) -> tuple[dict, dict]:
        """The attention's alignment scores of every forward run (with its reversed run, if any),
        by (variant, seed); then the statistical aligner's."""
        alignments = {}
        for forward in (r for r in runs if not r.reverse):
            backward = next(
                (r for r in runs if r.reverse and r.variant is forward.variant and r.seed == forward.seed), None
            )
            alignments[(forward.variant.name, forward.seed)] = score_alignments(forward, backward, self.settings)
        statistical = score_statistical(self.folders.shared / "train.tsv", self.out / "eflomal.json", self.settings)
        return alignments, statistical


def compare(
    config: str | Path, out: str | Path, varies: list[str] = (), variants: list[str | Variant] = (), **options
) -> dict:
    """Python API of ``attnmt compare``: the grid of ``varies`` ("FIELD=V1,V2") and the listed
    ``variants`` ("NAME:FIELD=V,..." , "NAME=OVERRIDES.yaml" or Variant objects), trained and scored;
    returns the table (as results.json). Options (see ComparisonSettings): steps, minutes, seeds,
    resume, join, beam, align_pairs, align_gold, one_based, both_directions, threshold, example,
    log, progress."""
    listed = [v if isinstance(v, Variant) else parse_variant(v) for v in variants]
    chosen = grid(list(varies)) + listed if varies else listed
    return Comparison(config, chosen, out, ComparisonSettings(**options)).run()
