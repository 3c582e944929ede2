"""Where local attention puts its window: the aligned positions p_t of trained models (E5).

    flock /tmp/attnmt-bench.lock python benchmarks/local_positions.py runs/experiments/e5-de-en/*/seed42 \\
        --src ../shared/data/multi30k/test_2016_flickr.de.gz --tgt ../shared/data/multi30k/test_2016_flickr.en.gz

Luong et al. (2015) centre the window of local attention on p_t = t (local-m) or on a position
predicted from the decoder state, p_t = (S - 1) sigmoid(v_p^T tanh(W_p s_t)) (local-p). For each
model, each pair of the test set is forced through it (teacher forcing on the reference) and every
step's p_t read; printed, over all target steps:

  - diagonal: the Pearson correlation of p_t / (S - 1) with t / (T - 1), the position on the
    diagonal of a monotonic alignment (1: p_t moves along the sentence as the output does);
  - |p - diagonal|: the mean distance from that diagonal position, in source pieces;
  - at an end: the share of steps whose p_t is within half a piece of the first or last source
    piece (a saturated sigmoid: its gradient, and so p_t's, near zero);
  - within D of argmax: the share of steps whose most attended source piece of the model's own
    global scores (softmax over the whole source) lies inside the window; where the scores
    would look, were the window not there.

A model without local attention (global) shows its argmax's position as p_t, for comparison.
"""

from __future__ import annotations

import argparse

import numpy as np
import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch


def positions(translator, sources: list[str], targets: list[str]):
    """Per pair: (p_t of each step, S, the argmax of the global softmax of each step)."""
    from attnmt.data.batching import make_batch
    from attnmt.data.subwords import BOS, EOS
    from attnmt.seq2seq.attention import LocalAttention

    model = translator.model
    attention = model.decoder.attention
    local = attention if isinstance(attention, LocalAttention) else None
    seen = {}
    if local is not None:
        aligned = local.aligned_position

        def recording(query, mask, steps):
            seen["p"] = aligned(query, mask, steps)
            scores = local.score(query, seen.pop("keys"), None).masked_fill(~mask.unsqueeze(1), float("-inf"))
            seen["argmax"] = scores.argmax(-1)
            return seen["p"]

        score = local.forward

        def forward(query, memory, keys, mask, prev_weights=None, steps=None):
            seen["keys"] = keys
            return score(query, memory, keys, mask, prev_weights, steps)

        local.aligned_position, local.forward = recording, forward
    out = []
    with torch.inference_mode():
        for src_ids, tgt_ids in zip(translator.source_ids(sources), translator.tgt_subwords.encode(targets)):
            tgt_ids = tgt_ids + [EOS]
            batch = make_batch([src_ids]).to(translator.device)
            tgt_in = torch.tensor([[BOS] + tgt_ids[:-1]], device=translator.device)
            _, weights = model.decoder_outputs(batch.src, batch.src_lengths, tgt_in)
            S = int(batch.src_lengths[0])
            if local is None:
                argmax = weights[0].argmax(-1).float()
                out.append((argmax.cpu().numpy(), S, argmax.cpu().numpy()))
            else:
                out.append((seen["p"][0].float().cpu().numpy(), S, seen["argmax"][0].float().cpu().numpy()))
    return out


def summary(rows, window: int | None) -> dict:
    p = np.concatenate([r[0] / max(r[1] - 1, 1) for r in rows])
    diagonal = np.concatenate([np.linspace(0, 1, len(r[0])) if len(r[0]) > 1 else np.zeros(1) for r in rows])
    distance = np.concatenate([np.abs(r[0] - np.linspace(0, r[1] - 1, len(r[0]))) for r in rows])
    ends = np.concatenate([(r[0] < 0.5) | (r[0] > r[1] - 1.5) for r in rows])
    inside = None if window is None else np.concatenate([np.abs(r[2] - r[0]) <= window for r in rows])
    return {
        "diagonal": float(np.corrcoef(p, diagonal)[0, 1]),
        "distance": float(distance.mean()),
        "ends": float(ends.mean()),
        "inside": None if inside is None else float(inside.mean()),
        "steps": int(p.size),
    }


def main():
    from attnmt.data.corpus import read_lines

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="trained model folders")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--limit", type=int, default=1000, help="first N pairs")
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/local_positions.py",
        [trained_model(folder, "a model to force the pairs through") for folder in args.models],
        [path(file, option) for file, option in ((args.src, "--src"), (args.tgt, "--tgt"))],
    )
    sources, targets = read_lines(args.src)[: args.limit], read_lines(args.tgt)[: args.limit]
    print(
        f"{'model':<56} {'attention':<34} {'diagonal':>8} {'|p - diagonal|':>14} {'at an end':>9} "
        f"{'within D of argmax':>18}"
    )
    for folder in args.models:
        translator = attnmt.load(folder)
        mc = translator.config.model
        local = mc.attention.local if mc.attention.type.startswith("luong-") else "none"
        window = None if local == "none" else mc.attention.window
        s = summary(positions(translator, sources, targets), window)
        inside = "-" if s["inside"] is None else f"{100 * s['inside']:.1f} %"
        print(
            f"{folder:<56} {mc.attention_name:<34} {s['diagonal']:8.3f} {s['distance']:14.2f} "
            f"{100 * s['ends']:8.1f} % {inside:>18}",
            flush=True,
        )


if __name__ == "__main__":
    main()
