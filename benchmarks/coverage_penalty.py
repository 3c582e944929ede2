"""The coverage penalty of Wu et al. (2016): does it help a beam search choose better translations?

    flock /tmp/attnmt-bench.lock python benchmarks/coverage_penalty.py runs/experiments/rnn-bahdanau \
        runs/experiments/transformer-averaged

Wu et al. score a finished hypothesis Y of a source X by

    s(Y, X) = log p(Y | X) / lp(Y) + beta * sum_i log(min(sum_t a_t,i, 1)),   lp(Y) = ((5 + |Y|) / 6) ** alpha

and report (their Table 2) +1.1 BLEU on WMT'14 English -> French from alpha = beta = 0.2 over
neither, for a model trained by maximum likelihood. For each model, every (alpha, beta) of the
grid decodes the dev set (default Multi30k val, German -> English) with beam --beam; the test set
is then decoded with the config's settings, the best alpha without coverage and the best pair,
as written and with its sentences joined --join at a time (under-translation is the failure
that the penalty fights, and joined sentences are where attention models leave parts out). Each
line: sacreBLEU, the paired bootstrap against the config's settings, the ratio of output to
reference words, and the share of source words whose summed attention is below 0.2 ("unattended",
attnmt.translation.evaluation.attention_failures).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def decoded(model, sources: list[str], beam: int, alpha: float, beta: float):
    model.set_decoding(length_penalty=alpha, coverage_penalty=beta)
    return model.translate(sources, beam=beam, batch_size=32)


def measures(translations, references: list[str]) -> dict:
    import sacrebleu

    from attnmt.seq2seq.links import word_matrix
    from attnmt.translation.evaluation import attention_failures

    hypotheses = [t.text for t in translations]
    matrices = [
        None if t.best.attention is None else word_matrix(t.best.attention, t.source_tokens, t.best.tokens)
        for t in translations
    ]
    failures = attention_failures(matrices, hypotheses, references)
    words = sum(len(h.split()) for h in hypotheses) / sum(len(r.split()) for r in references)
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "hypotheses": hypotheses,
        "length": words,
        "unattended": failures["unattended"] / max(failures["source_words"] or 1, 1),
    }


def significance(baseline: list[str], system: list[str], references: list[str]) -> float:
    """The p-value of sacreBLEU's paired bootstrap (1,000 resamples) of ``system`` against ``baseline``."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"BLEU": BLEU()},
        references=[references],
        test_type="bs",
        n_samples=1000,
    )
    _, scores = test()
    return scores["BLEU"][1].p_value


def run_model(folder: str, args, dev, test) -> None:
    import attnmt
    from attnmt.translation.evaluation import joined

    model = attnmt.load(folder, args.checkpoint)
    defaults = model.config.decoding
    grid = {}
    started = time.perf_counter()
    for alpha, beta in itertools.product(args.alphas, args.betas):
        grid[alpha, beta] = measures(decoded(model, dev[0], args.beam, alpha, beta), dev[1])["bleu"]
    kind = model.config.model.attention.type if model.config.model.type == "rnn" else "multi-head"
    print(
        f"\n{folder} ({model.config.model.type}, {kind} attention): dev BLEU, beam {args.beam} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    print("alpha \\ beta " + "".join(f"{b:>8g}" for b in args.betas))
    for alpha in args.alphas:
        print(f"{alpha:>12g} " + "".join(f"{grid[alpha, b]:8.2f}" for b in args.betas))
    no_coverage = max(args.alphas, key=lambda a: grid[a, 0.0])
    best = max(grid, key=grid.get)
    settings = {
        "config": (defaults.length_penalty, defaults.coverage_penalty),
        "best alpha, no coverage": (no_coverage, 0.0),
        "best alpha and beta": best,
    }
    for name, (sources, references) in [
        ("test", test),
        *[(f"test joined {k} at a time", joined(*test, k)) for k in args.join],
    ]:
        print(f"{name} ({len(sources)} sentences):")
        results = {what: measures(decoded(model, sources, args.beam, *ab), references) for what, ab in settings.items()}
        base = results["config"]["hypotheses"]
        for what, (alpha, beta) in settings.items():
            r = results[what]
            changed = sum(a != b for a, b in zip(base, r["hypotheses"]))
            p = (
                ""
                if what == "config"
                else "  same outputs"
                if not changed
                else f"  p = {significance(base, r['hypotheses'], references):.3f}, {changed} outputs changed"
            )
            print(
                f"  {what:<24} alpha {alpha:<4g} beta {beta:<4g} BLEU {r['bleu']:6.2f}  words/reference "
                f"{r['length']:.3f}  unattended {100 * r['unattended']:5.2f} %{p}"
            )


def main():
    from attnmt.data.corpus import read_lines

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="trained model folders (source -> target of the data)")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--dev", nargs=2, type=Path, default=[MULTI30K / "val.de.gz", MULTI30K / "val.en.gz"])
    parser.add_argument(
        "--test", nargs=2, type=Path, default=[MULTI30K / "test_2016_flickr.de.gz", MULTI30K / "test_2016_flickr.en.gz"]
    )
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--alphas", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.2, 0.6, 1.0])
    parser.add_argument("--betas", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.1, 0.2, 0.4, 1.0])
    parser.add_argument("--join", type=lambda s: [int(x) for x in s.split(",")], default=[3])
    parser.add_argument("--limit", type=int, default=None, help="the first N sentences of each set (a quick check)")
    args = parser.parse_args()
    if 0.0 not in args.betas:
        parser.error("--betas must include 0 (no coverage penalty)")
    from requirements import check, path, trained_model

    check(
        "benchmarks/coverage_penalty.py",
        [trained_model(folder, "a model to decode with") for folder in args.models],
        [path(file, option) for option, pair in (("--dev", args.dev), ("--test", args.test)) for file in pair],
    )
    dev, test = ([read_lines(path)[: args.limit] for path in pair] for pair in (args.dev, args.test))
    print(f"coverage penalty, beam {args.beam}; {time.strftime('%Y-%m-%d %H:%M')}")
    for folder in args.models:
        run_model(folder, args, dev, test)


if __name__ == "__main__":
    main()
