"""Benchmark the decomposable attention model (Parikh et al. 2016) on SICK: accuracy on SICK test
(selected on trial), parameter count and training minutes, under a step budget (the accuracy does
not depend on the machine's load; the minutes do: measure them on an idle machine).

    python benchmarks/decomposable.py                          # random embeddings, configs/sick-decomposable.yaml
    python benchmarks/decomposable.py --embeddings word2vec    # skip-gram vectors of Multi30k's English side
    python benchmarks/decomposable.py --embeddings both        # the two side by side: what Multi30k brings
    python benchmarks/decomposable.py --steps 100              # a quick check that it runs
    python benchmarks/decomposable.py --normalizers softmax,sparsemax,entmax15 --attend dot,one-to-one
                                                               # sparse attention (E6): every pair of the two

Each run trains in OUT/NAME (OUT: runs/bench-decomposable) and prints, then writes to
OUT/results.json: test accuracy, macro F1, best trial accuracy and its step, parameters,
minutes of training (wall clock, word2vec included) and the hypothesis tokens a premise token
attends to on test (a weight above 0, of how many there are), beside the majority class (NEUTRAL).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K_EN = REPO.parent / "shared" / "data" / "multi30k" / "train.en.gz"


def run(
    config_path: Path,
    out: Path,
    name: str,
    steps: int | None,
    threads: int,
    word2vec: Path | None,
    model: dict | None = None,
    seed: int | None = None,
) -> dict:
    from safetensors.torch import load_file

    from attnmt.core.config import load_config
    from attnmt.training import train

    config = load_config(config_path)
    config.experiment_dir = out / name
    config.training.threads = threads
    if seed is not None:
        config.training.seed = seed
    config.model = type(config.model).model_validate({**config.model.model_dump(), **(model or {})})  # --attend ...
    if steps:
        config.training.max_steps = steps
        config.training.validate_every = min(config.training.validate_every, steps)
    if word2vec is not None:
        from attnmt.core.config import EmbeddingsConfig

        config.model.embeddings = EmbeddingsConfig(word2vec=word2vec)
    if (config.experiment_dir / "last.safetensors").exists():
        sys.exit(f"{config.experiment_dir} exists: delete it (or give another --out) to measure again")
    start = time.perf_counter()
    state = train(config, log=lambda message: print(f"[{name}] {message}", flush=True), progress=False)
    minutes = (time.perf_counter() - start) / 60
    folder = config.experiment_dir
    test = json.loads((folder / "test-scores.json").read_text())["sick-test"]
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    best = max((r for r in records if r["type"] == "valid"), key=lambda r: r["accuracy"])
    parameters = sum(t.numel() for t in load_file(folder / "best.safetensors").values())
    majority = max(test["per_class"].values(), key=lambda c: c["support"])["support"] / test["pairs"]
    attended, length = attended_words(folder, config.data.test["sick-test"])
    return {
        "name": name,
        "test_accuracy": test["accuracy"],
        "test_macro_f1": test["macro_f1"],
        "trial_accuracy": best["accuracy"],
        "best_step": best["step"],
        "steps": state.step,
        "parameters": parameters,
        "minutes": minutes,
        "majority_class": majority,
        "threads": threads,
        "attended": attended,
        "hypothesis_length": length,
    }


def attended_words(folder: Path, files) -> tuple[float, float]:
    """On the test pairs: the mean number of hypothesis tokens that a premise token attends to (a
    weight above 0: all of them with softmax), and the mean number there are (</s> included)."""
    import numpy as np

    from attnmt.api import load
    from attnmt.pairs.data import read_pairs

    corpus = read_pairs(files)
    results = load(folder).classify(list(zip(corpus.premises, corpus.hypotheses)))
    rows = [row for r in results for row in np.asarray(r.premise_attention)]
    return float(np.mean([(row > 0).sum() for row in rows])), float(np.mean([row.size for row in rows]))


def check_requirements(args):
    """The config, its SICK files and, for word2vec embeddings, gensim and Multi30k's English text,
    checked before the first training."""
    from requirements import check, extra, path

    word2vec = args.embeddings in ("word2vec", "both")
    corpora = []
    if args.config.is_file():
        from attnmt.core.config import load_config

        data = load_config(args.config).data
        corpora = [data.train, data.dev, *data.test.values()]
    check(
        "benchmarks/decomposable.py",
        path(args.config, "the configuration (--config)"),
        [path(corpus.tsv, f"a corpus of {args.config}") for corpus in corpora if getattr(corpus, "tsv", None)],
        extra("vectors", "gensim", "trains the word2vec embeddings (--embeddings word2vec)") if word2vec else None,
        path(args.multi30k, "the English text of the word2vec embeddings (--multi30k)") if word2vec else None,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "sick-decomposable.yaml")
    parser.add_argument("--embeddings", choices=["random", "word2vec", "both"], default="random")
    parser.add_argument("--multi30k", type=Path, default=MULTI30K_EN, help="English text for word2vec")
    parser.add_argument("--steps", type=int, help="training steps (default: the config's max_steps)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the target's 2 cores)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-decomposable")
    parser.add_argument("--attend", help="model.attend of each run, comma-separated (default: the config's)")
    parser.add_argument(
        "--normalizers",
        help="model.attention_normalizer of each run, comma-separated: softmax, "
        "sparsemax, entmax15 (default: the config's)",
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="runs of each setting, seeds 42, 43, ... (default 1: the config's seed)"
    )
    args = parser.parse_args(argv)
    check_requirements(args)
    kinds = ["random", "word2vec"] if args.embeddings == "both" else [args.embeddings]
    models = [{}]
    for field, values in (("attend", args.attend), ("attention_normalizer", args.normalizers)):
        if values:
            models = [{**m, field: value} for m in models for value in values.split(",")]
    seeds = [None] if args.seeds == 1 else [42 + k for k in range(args.seeds)]
    results = [
        run(
            args.config,
            args.out,
            "-".join(["sick", kind, *model.values(), *([f"seed{seed}"] if seed else [])]),
            args.steps,
            args.threads,
            args.multi30k if kind == "word2vec" else None,
            model,
            seed,
        )
        for kind in kinds
        for model in models
        for seed in seeds
    ]
    width = max(12, *(len(r["name"]) for r in results))
    print(
        f"\n{'run':<{width}} {'test acc':>9} {'macro F1':>9} {'trial acc':>10} {'best step':>10} "
        f"{'parameters':>11} {'minutes':>8} {'attended':>16}"
    )
    for r in results:
        print(
            f"{r['name']:<{width}} {100 * r['test_accuracy']:8.2f}% {100 * r['test_macro_f1']:8.2f}% "
            f"{100 * r['trial_accuracy']:9.2f}% {r['best_step']:>10} {r['parameters']:>11,} {r['minutes']:8.1f} "
            f"{r['attended']:6.2f} of {r['hypothesis_length']:5.2f}"
        )
    print(f"majority class on SICK test: {100 * results[0]['majority_class']:.2f}%; threads {args.threads}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
