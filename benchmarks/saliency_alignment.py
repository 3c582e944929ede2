"""Does saliency align words better than attention? On the Hansards gold set (English -> French).

    flock /tmp/attnmt-bench.lock python benchmarks/saliency_alignment.py \\
        runs/experiments/e4-saliency/bahdanau/seed42 runs/experiments/e4-saliency/transformer/seed42

Ding, Xu & Koehn (2019, "Saliency-driven Word Alignment Interpretation for Neural Machine
Translation") read word alignments from gradients (how much each source word's embedding moves
the probability of each output word) and found them better than those read from attention, most of
all for Transformers. For each model (E4's models of docs/alignment.md: trained on Multi30k
English-French tokenized as the gold text, with the 447 gold pairs' text appended), this aligns the
447 pairs by forced decoding and scores them against the gold links (AER, precision, recall; argmax
links, each target word to one source word):

  - attention: the decoder's attention (a Transformer's last layer, its heads averaged, each layer,
    and each head of each layer alone);
  - saliency: gradient x input (attnmt.translation.saliency), and SmoothGrad over --samples noisy
    copies of the source embeddings.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "runs" / "e4-data"  # python -m attnmt.translation.hansards runs/e4-data


def scored(links, gold) -> dict:
    from attnmt.translation.align import alignment_scores

    return alignment_scores([set(pair) for pair in links], *gold)


def run_model(folder: str, pairs: tuple[list[str], list[str]], gold, samples: int):
    import attnmt
    from attnmt.translation.align import align

    model = attnmt.load(folder)
    rows = []
    layers = model.config.model.decoder_layers if model.config.model.type == "transformer" else 0
    readings = [("attention" + (" (last layer, heads averaged)" if layers else ""), {})]
    readings += [(f"attention, layer {layer}", {"layer": layer}) for layer in range(layers - 1)]
    heads = model.config.model.heads if layers else 0
    readings += [
        (f"attention, layer {layer}, head {head}", {"layer": layer, "heads": [head]})
        for layer in range(layers)
        for head in range(heads)
    ]
    readings += [
        ("saliency: gradient x input", {"saliency": 0}),
        (f"saliency: SmoothGrad, {samples} samples", {"saliency": samples}),
    ]
    for name, options in readings:
        started = time.perf_counter()
        scores = scored(align(model, *pairs, method="argmax", **options), gold)
        rows.append((name, scores, time.perf_counter() - started))
    print(
        f"\n{folder} ({model.config.model.type}"
        f"{'' if layers else ', ' + model.config.model.attention.type + ' attention'}): the 447 Hansards gold pairs"
    )
    print(f"   {'links from':<42} {'AER':>6} {'precision':>9} {'recall':>7} {'seconds':>8}")
    for name, scores, seconds in rows:
        print(
            f"   {name:<42} {100 * scores['aer']:6.1f} {100 * scores['precision']:9.1f} "
            f"{100 * scores['recall']:7.1f} {seconds:8.0f}",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="English -> French model folders")
    parser.add_argument("--data", default=str(DATA), help="the folder of hansards.pairs and hansards.gold")
    parser.add_argument("--samples", type=int, default=10, help="SmoothGrad samples (default 10)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from requirements import check, files, trained_model

    check(
        "benchmarks/saliency_alignment.py",
        [trained_model(folder, "an English -> French model") for folder in args.models],
        files(
            args.data,
            ["hansards.pairs", "hansards.gold"],
            "the Hansards gold alignments (--data)",
            "make them first: python -m attnmt.translation.hansards runs/e4-data --data ../shared/data",
        ),
    )
    import torch

    from attnmt.compare.runs import read_align_pairs
    from attnmt.translation.align import read_gold

    torch.set_num_threads(args.threads)
    pairs = read_align_pairs(Path(args.data) / "hansards.pairs")
    gold = read_gold(Path(args.data) / "hansards.gold", one_based=True)
    for folder in args.models:
        run_model(folder, pairs, gold, args.samples)


if __name__ == "__main__":
    main()
