"""How well a translation model's scores (attnmt score) find pairs that are not translations of each
other: the noise that filtering a crawled corpus removes (Khayrallah & Koehn 2018 name its kinds).

    flock /tmp/attnmt-bench.lock python benchmarks/score_filtering.py --model runs/experiments/transformer-averaged

Takes the first --limit pairs of a test set (default: Multi30k test_2016_flickr German -> English),
spoils --noisy of them of each kind, other pairs untouched:
    misaligned   the translation of another sentence of the set
    copy         the source itself as its translation (untranslated)
    truncated    the first half of the translation's words (a partial translation)
    shuffled     the translation's words in a random order (a fluent-looking bag of the right words)
and scores every pair with Translator.score. For each ranking (lowest first) it prints the ROC AUC of
each kind against the clean pairs (1.0: every spoiled pair ranks below every clean one; 0.5: chance)
and the share of spoiled pairs among the lowest ranked as many as there are spoiled ones. Rankings:
the log-probability per token (`attnmt score --normalize`), the sum (`attnmt score`), and, for scale,
the length ratio of the two sides (a filter's usual first rule); with --backward DIR (a target ->
source model) also that model's log-probability per token of the source given the translation and
the dual conditional cross-entropy of both (attnmt.translation.filtering, `attnmt score --backward`).
Also the model's perplexity on the clean pairs and the scoring speed (pairs/s).

    python benchmarks/score_filtering.py --model runs/experiments/transformer-averaged \
        --backward runs/experiments/transformer-en-de
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
KINDS = ("misaligned", "copy", "truncated", "shuffled")


def spoil(sources: list[str], targets: list[str], noisy: int, seed: int) -> tuple[list[str], list[str]]:
    """The translations with ``noisy`` pairs of each kind spoiled, and each pair's kind ("clean" if not)."""
    rng = random.Random(seed)
    chosen = rng.sample(range(len(sources)), noisy * len(KINDS))
    kinds = ["clean"] * len(sources)
    spoiled = list(targets)
    for n, i in enumerate(chosen):
        kind = KINDS[n // noisy]
        kinds[i] = kind
        words = targets[i].split()
        if kind == "misaligned":
            spoiled[i] = targets[rng.choice([j for j in range(len(targets)) if j != i])]
        elif kind == "copy":
            spoiled[i] = sources[i]
        elif kind == "truncated":
            spoiled[i] = " ".join(words[: max(1, len(words) // 2)])
        else:
            spoiled[i] = " ".join(rng.sample(words, len(words)))
    return spoiled, kinds


def auc(noisy: np.ndarray, clean: np.ndarray) -> float:
    """P(a spoiled pair scores below a clean one), ties counted half (the Mann-Whitney statistic)."""
    below = (noisy[:, None] < clean[None, :]).mean()
    ties = (noisy[:, None] == clean[None, :]).mean()
    return float(below + ties / 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a translation model folder")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--src", type=Path, default=MULTI30K / "test_2016_flickr.de.gz")
    parser.add_argument("--tgt", type=Path, default=MULTI30K / "test_2016_flickr.en.gz")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--noisy", type=int, default=50, help="pairs spoiled of each kind (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backward", help="a target -> source model: its score and the dual score too")
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/score_filtering.py",
        trained_model(args.model, "the translation model (--model)"),
        trained_model(args.backward, "the target -> source model (--backward)") if args.backward else None,
        [path(file, option) for file, option in ((args.src, "--src"), (args.tgt, "--tgt"))],
    )

    import attnmt
    from attnmt.data.corpus import read_lines  # plain or gzip, errors naming the file

    translator = attnmt.load(args.model, args.checkpoint)
    sources, references = read_lines(args.src)[: args.limit], read_lines(args.tgt)[: args.limit]
    targets, kinds = spoil(sources, references, args.noisy, args.seed)
    start = time.perf_counter()
    scored = translator.score(sources, targets, batch_size=64)
    seconds = time.perf_counter() - start
    kinds = np.array(kinds)
    rankings = {
        "log-prob per token": np.array([s.per_token for s in scored]),
        "log-prob (sum)": np.array([s.log_prob for s in scored]),
        "length ratio": -np.array(
            [abs(np.log(max(len(t.split()), 1) / max(len(s.split()), 1))) for s, t in zip(sources, targets)]
        ),
    }
    if args.backward:
        from attnmt.translation.filtering import dual_scores

        dual = dual_scores(translator, attnmt.load(args.backward, args.checkpoint), sources, targets, batch_size=64)
        rankings["backward per token"] = np.array([d.backward.per_token for d in dual])
        rankings["dual cross-entropy"] = np.array([d.score for d in dual])
    clean = kinds == "clean"
    tokens = sum(len(s.tokens) for s, c in zip(scored, clean) if c)
    perplexity = np.exp(-sum(s.log_prob for s, c in zip(scored, clean) if c) / tokens)
    print(
        f"{translator.folder} ({args.checkpoint}), {len(sources)} pairs of {args.src.name}, {args.noisy} spoiled "
        f"of each kind (seed {args.seed}); scored in {seconds:.1f} s ({len(sources) / seconds:.0f} pairs/s); "
        f"perplexity of the clean pairs {perplexity:.2f}"
    )
    print(f"{'ranking':<20}" + "".join(f"{'AUC ' + kind:>16}" for kind in KINDS) + f"{'spoiled in lowest':>20}")
    spoiled_count = int((~clean).sum())
    for name, values in rankings.items():
        lowest = np.argsort(values, kind="stable")[:spoiled_count]
        share = (~clean[lowest]).mean()
        print(
            f"{name:<20}"
            + "".join(f"{auc(values[kinds == kind], values[clean]):>16.3f}" for kind in KINDS)
            + f"{share:>20.1%}"
        )


if __name__ == "__main__":
    main()
