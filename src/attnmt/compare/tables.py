"""The results of a comparison: the results files read back and validated (each run's
results.json and alignment.json, eflomal.json), and the tables made of them (results.json of
--out: every number of every variant as mean, standard deviation and values over the seeds;
results.md: the same as Markdown tables).

A results file that is not what compare wrote (invalid JSON, a number that is not finite, a field
of the wrong type) is an error naming the file and the field.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter

from attnmt.compare.runs import Run
from attnmt.core.errors import AttnmtError
from attnmt.core.files import read_checked_json

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
    trigrams: int | None = None  # (not in the results of runs scored before they were counted)
    repeated_trigrams: int | None = None


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
    value = read_checked_json(
        path, schema.validate_json, "the results", "not the file compare wrote: delete it to score the run again"
    )
    return schema.dump_python(value)


def checked_run_record(path: Path, run: Run) -> dict:
    """A run's results.json, checked, and of that run."""
    record = read_results(path, TypeAdapter(RunRecord))
    wanted = {"variant": run.variant.name, "seed": run.seed, "reverse": run.reverse}
    for key, value in wanted.items():
        if record[key] != value:
            raise AttnmtError(
                f"{path}: {key}: {record[key]!r}, but the run in this folder has {value!r}; not the file "
                "compare wrote: delete it to score the run again"
            )
    return record


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
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def summarize(
    records: list[dict], alignments: dict, statistical: dict, variants: list[str], test_names: list[str]
) -> dict:
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
    row["scores"] = {
        method: {m: spread([seed["scores"][method][m] for seed in seeds]) for m in ("aer", "precision", "recall")}
        for method in seeds[0]["scores"]
    }
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
    parts = [
        "## Translation\n\nMean ± standard deviation over the seeds. Perplexity per target subword; "
        "speed in the training run (target tokens and sentences per second, validation excluded).\n",
        _markdown(
            [
                "variant",
                *[f"BLEU {t}" for t in tests],
                f"chrF {first}",
                f"perplexity {first}",
                "sentences/s",
                "steps",
                "minutes",
            ],
            [
                [
                    v,
                    *[_cell(m.get(f"tests/{t}/bleu/score")) for t in tests],
                    _cell(m.get(f"tests/{first}/chrf/score")),
                    _cell(m.get(f"tests/{first}/perplexity"), 2),
                    _cell(m.get("sentences_per_s"), 0),
                    _cell(m.get("steps"), 0),
                    _cell(m.get("minutes")),
                ]
                for v, m in metrics.items()
            ],
        ),
    ]
    for test in tests:
        prefix = f"tests/{test}/by_length/"
        labels = sorted(
            {k[len(prefix) :] for m in metrics.values() for k in m if k.startswith(prefix)},
            key=lambda label: int(label.split("-")[0].rstrip("+")),
        )
        sizes = {label: _bucket_sizes(metrics, test, label) for label in labels}
        parts.append(f"## BLEU by source length: {test}\n\nSource words (sentences).\n")
        parts.append(
            _markdown(
                ["variant", *[f"{label} ({sizes[label]})" for label in labels]],
                [[v, *[_cell(m.get(prefix + label)) for label in labels]] for v, m in metrics.items()],
            )
        )
    parts.append(
        "## Attention failures\n\nSource words whose attention summed over the output is < 0.2 "
        "(unattended) or > 3 (over-attended), per 100 source words; outputs more than twice (too long) "
        "or less than half (too short) as long as their reference, in sentences; word trigrams that "
        "their output wrote before (repeated), per 100 trigrams.\n"
    )
    parts.append(
        _markdown(
            ["variant", "test set", "unattended %", "over-attended %", "too long", "too short", "repeated 3-grams %"],
            [[v, t, *_failure_cells(m, t)] for v, m in metrics.items() for t in tests],
        )
    )
    if table["alignment"] or table["statistical"]:
        parts.append(alignment_markdown(table))
    return "\n".join(parts)


def _bucket_sizes(metrics: dict, test: str, label: str) -> str:
    """Sentences in the bucket (the same test set for every variant)."""
    counts = [
        m[f"tests/{test}/bucket_sentences/{label}"]["mean"]
        for m in metrics.values()
        if f"tests/{test}/bucket_sentences/{label}" in m
    ]
    return f"{counts[0]:.0f}" if counts else "?"


def _failure_cells(m: dict, test: str) -> list[str]:
    words = m.get(f"tests/{test}/failures/source_words")
    cells = [_percent(m.get(f"tests/{test}/failures/{kind}"), words) for kind in ("unattended", "over_attended")]
    cells += [_cell(m.get(f"tests/{test}/failures/{kind}"), 1) for kind in ("too_long", "too_short")]
    return cells + [
        _percent(m.get(f"tests/{test}/failures/repeated_trigrams"), m.get(f"tests/{test}/failures/trigrams"))
    ]


def _percent(count: dict | None, total: dict | None) -> str:
    """100 count / total of two metrics' means; "-" where either is missing or the total is 0."""
    return "-" if not count or not total or not total["mean"] else f"{100 * count['mean'] / total['mean']:.1f}"


ALIGNMENT_COLUMNS = ("forward", "backward", "intersection", "union", "grow-diag-final")


def alignment_markdown(table: dict) -> str:
    rows = []
    for variant, variant_rows in table["alignment"].items():
        for row in variant_rows:
            how = f"{row['attention']}{', shifted' if row['shift'] else ''}, {row['links']}"
            rows.append([variant, how, *[_cell(_aer(row["scores"].get(c)), 1) for c in ALIGNMENT_COLUMNS]])
    for name, scores in table["statistical"].items():
        rows.append([name, "Gibbs sampling", *[_cell(_aer(spread_of(scores.get(c))), 1) for c in ALIGNMENT_COLUMNS]])
    return (
        "## Word alignment\n\nAER (%) on the gold set, lower is better; precision and recall in "
        "results.json.\n\n" + _markdown(["aligner", "links", *ALIGNMENT_COLUMNS], rows)
    )


def spread_of(scores: dict | None) -> dict | None:
    """One run's scores as spreads (of one value)."""
    return None if scores is None else {m: spread([scores[m]]) for m in ("aer", "precision", "recall")}


def _aer(scores: dict | None) -> dict | None:
    if scores is None:
        return None
    aer = scores["aer"]
    return {"mean": 100 * aer["mean"], "sd": 100 * aer["sd"], "values": aer["values"]}
