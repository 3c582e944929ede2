"""How sparse the attention of trained models is, and what its support is worth as word links (E6).

    flock /tmp/attnmt-bench.lock python benchmarks/attention_sparsity.py runs/experiments/e6-de-en/*/seed42 \\
        --src ../shared/data/multi30k/test_2016_flickr.de.gz --tgt ../shared/data/multi30k/test_2016_flickr.en.gz
    flock /tmp/attnmt-bench.lock python benchmarks/attention_sparsity.py runs/experiments/e6-en-fr/*/seed42 \\
        --src runs/e4-data/hansards.pairs --gold runs/e4-data/hansards.gold --one-based

Each pair is forced through each model (teacher forcing on the reference: the weights of every
output step, as attnmt align reads them) and printed, over all output steps:

  - attended: the mean number of source pieces with a weight above 0, of the mean number there are
    (softmax: all of them; sparsemax and 1.5-entmax: their support);
  - one piece: the share of steps that attend to a single piece (weight 1);
  - 90 % of the weight: the mean number of pieces, the most attended first, that it takes to hold
    90 % of the step's weight (how concentrated softmax is, compared on the same scale);
  - top weight: the mean of each step's largest weight.

For a Transformer, the weights are those attnmt align reads: its last layer's cross-attention,
averaged over the heads (a piece counts as attended when any head attends to it).

With --gold (a "source ||| target" file and its gold links, as attnmt compare's --align-pairs and
--align-gold), also the AER of the forward attention's word links read two ways: argmax (each
target word to its most attended source word, as E4) and support (every source word it attends to
at all: for softmax, every word).
"""

from __future__ import annotations

import argparse

import numpy as np


def sparsity(matrices: list[np.ndarray]) -> dict:
    """The figures above, over every row (output step) of the piece matrices."""
    rows = [row for m in matrices for row in np.asarray(m, dtype=np.float64)]
    ordered = [np.sort(row)[::-1] for row in rows]
    return {
        "pieces": float(np.mean([row.size for row in rows])),
        "attended": float(np.mean([(row > 0).sum() for row in rows])),
        "one": float(np.mean([(row > 0).sum() == 1 for row in rows])),
        "ninety": float(np.mean([np.searchsorted(np.cumsum(o), 0.9 - 1e-9) + 1 for o in ordered])),
        "top": float(np.mean([o[0] for o in ordered])),
        "steps": len(rows),
    }


def support_links(matrix: np.ndarray) -> list[tuple[int, int]]:
    """(source word i, target word j) for every word weight above 0."""
    rows, cols = np.nonzero(np.asarray(matrix) > 0)
    return sorted((int(i), int(j)) for j, i in zip(rows, cols))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="trained model folders")
    parser.add_argument("--src", required=True, help="source sentences, or with --gold 'source ||| target' lines")
    parser.add_argument("--tgt", help="their references (without --gold)")
    parser.add_argument("--gold", help="gold links of the --src pairs (Pharaoh, sure 'i-j', possible 'i?j')")
    parser.add_argument("--one-based", action="store_true", help="the gold links count from 1")
    parser.add_argument("--limit", type=int, default=1000, help="first N pairs")
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/attention_sparsity.py",
        [trained_model(folder, "a trained model to force the pairs through") for folder in args.models],
        [
            path(file, option)
            for file, option in ((args.src, "--src"), (args.tgt, "--tgt"), (args.gold, "--gold"))
            if file
        ],
    )
    import attnmt
    from attnmt.compare.runs import read_align_pairs
    from attnmt.data.corpus import read_lines
    from attnmt.seq2seq.links import alignments_from_attention
    from attnmt.translation.align import alignment_scores, force_attention, read_gold, word_attention

    if args.gold:
        sources, targets = read_align_pairs(args.src)
        sure, possible = read_gold(args.gold, args.one_based)
    else:
        sources, targets = read_lines(args.src), read_lines(args.tgt)
    sources, targets = sources[: args.limit], targets[: args.limit]
    if args.gold:
        sure, possible = sure[: args.limit], possible[: args.limit]
    width = max(len(folder) for folder in args.models)
    header = (
        f"{'model':<{width}} {'attention':<26} {'attended':>16} {'one piece':>9} {'90 % of the weight':>18} "
        f"{'top weight':>10}"
    )
    print(header + (f" {'AER argmax':>10} {'AER support':>11} {'P / R support':>13}" if args.gold else ""))
    for folder in args.models:
        translator = attnmt.load(folder)
        matrices = force_attention(translator, sources, targets)
        s = sparsity(matrices)
        mc = translator.config.model
        name = mc.transformer_name.replace(" attention", "") if mc.type == "transformer" else mc.attention_name
        line = (
            f"{folder:<{width}} {name:<26} "
            f"{s['attended']:6.1f} of {s['pieces']:5.1f} {100 * s['one']:7.1f} % {s['ninety']:18.2f} "
            f"{s['top']:10.3f}"
        )
        if args.gold:
            words = word_attention(translator, sources, targets, matrices)
            argmax = alignment_scores([alignments_from_attention(m, "argmax") for m in words], sure, possible)
            support = alignment_scores([support_links(m) for m in words], sure, possible)
            line += (
                f" {100 * argmax['aer']:9.1f} % {100 * support['aer']:9.1f} % "
                f"{100 * support['precision']:5.1f} / {100 * support['recall']:4.1f}"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
