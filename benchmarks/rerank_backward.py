"""Reranking a beam's n-best list with a backward model: does log p(x | y) help choose the translation?

    flock /tmp/attnmt-bench.lock python benchmarks/rerank_backward.py --model runs/experiments/transformer-averaged \
        --backward runs/experiments/transformer-en-de

The forward model (source -> target) writes the --n-best best of a beam of --beam for every sentence
of the dev and the test set (default Multi30k val and test_2016, German -> English); each candidate
is scored

    s(y) = log p_f(y | x) / |y| + weight * log p_b(x | y) / |x|           (per token, each model's pieces)

(the direct and the channel model of noisy-channel reranking, Yee et al. 2019, without their
language model; Li & Jurafsky 2016's mutual information), with `Translator.score` both ways. The
weight is chosen on dev among --weights; the test set is then scored with it and compared with the
beam's own best (sacreBLEU, and the paired bootstrap of sacreBLEU against the beam's best).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def candidates(forward, backward, sources: list[str], beam: int, n_best: int):
    """Per sentence, its candidates as (text, forward per token, backward per token), beam order."""
    translations = forward.translate(sources, beam=beam, n_best=n_best, batch_size=32)
    pairs = [(t.source, c.text) for t in translations for c in t.candidates]
    there = forward.score([s for s, _ in pairs], [y for _, y in pairs], batch_size=64)
    back = backward.score([y for _, y in pairs], [s for s, _ in pairs], batch_size=64)
    scored, i = [], 0
    for t in translations:
        scored.append([(c.text, there[i + j].per_token, back[i + j].per_token) for j, c in enumerate(t.candidates)])
        i += len(t.candidates)
    return scored


def chosen(scored, weight: float) -> list[str]:
    return [
        max(cands, key=lambda c: c[1] + weight * c[2])[0] if weight is not None else cands[0][0] for cands in scored
    ]


def main():
    import sacrebleu

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--backward", required=True)
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--dev", nargs=2, type=Path, default=[MULTI30K / "val.de.gz", MULTI30K / "val.en.gz"])
    parser.add_argument(
        "--test", nargs=2, type=Path, default=[MULTI30K / "test_2016_flickr.de.gz", MULTI30K / "test_2016_flickr.en.gz"]
    )
    parser.add_argument("--beam", type=int, default=10)
    parser.add_argument("--n-best", type=int, default=10)
    parser.add_argument("--weights", default="0,0.25,0.5,0.75,1,1.5,2")
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/rerank_backward.py",
        trained_model(args.model, "the forward model (--model)"),
        trained_model(args.backward, "the backward model (--backward)"),
        [path(file, option) for option, pair in (("--dev", args.dev), ("--test", args.test)) for file in pair],
    )

    import attnmt
    from attnmt.data.corpus import read_lines  # plain or gzip, errors naming the file

    forward, backward = attnmt.load(args.model, args.checkpoint), attnmt.load(args.backward, args.checkpoint)
    weights = [float(w) for w in args.weights.split(",")]
    results = {}
    for name, (src, ref) in (("dev", args.dev), ("test", args.test)):
        start = time.perf_counter()
        sources, references = read_lines(src), read_lines(ref)
        scored = candidates(forward, backward, sources, args.beam, args.n_best)
        results[name] = (scored, references)
        print(
            f"{name}: {len(sources)} sentences, {args.n_best} candidates each (beam {args.beam}), "
            f"{time.perf_counter() - start:.0f} s"
        )
    dev_scored, dev_refs = results["dev"]
    print(f"{'weight':>8}{'dev BLEU':>10}")
    print(f"{'beam':>8}{sacrebleu.corpus_bleu(chosen(dev_scored, None), [dev_refs]).score:>10.2f}")
    by_weight = {w: sacrebleu.corpus_bleu(chosen(dev_scored, w), [dev_refs]).score for w in weights}
    for w, bleu in by_weight.items():
        print(f"{w:>8g}{bleu:>10.2f}")
    best = max(by_weight, key=by_weight.get)
    test_scored, test_refs = results["test"]
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest  # the paired bootstrap of `sacrebleu --paired-bs`

    systems = [
        ("beam's best", chosen(test_scored, None)),
        ("forward per token (weight 0)", chosen(test_scored, 0.0)),
        (f"with the backward model (dev's weight {best:g})", chosen(test_scored, best)),
    ]
    test = PairedTest(systems, {"BLEU": BLEU(), "chrF": CHRF()}, references=[test_refs], test_type="bs", n_samples=1000)
    _, stats = test()
    print("test: system, BLEU, chrF, p against the beam's best (paired bootstrap, BLEU and chrF), changed outputs")
    for i, (name, outputs) in enumerate(systems):
        bleu, chrf = stats["BLEU"][i], stats[[k for k in stats if k.startswith("chrF")][0]][i]
        p = "" if i == 0 else f"   p {bleu.p_value:.4f} / {chrf.p_value:.4f}"
        changed = sum(a != b for a, b in zip(systems[0][1], outputs))
        print(f"  {name:<44}{bleu.score:>7.2f}{chrf.score:>7.2f}{p}   {changed} changed")


if __name__ == "__main__":
    main()
