"""Are all of a Transformer's attention heads needed? Heads switched off at test time, one at a time and
then many, on Multi30k German -> English.

    flock /tmp/attnmt-bench.lock python benchmarks/head_pruning.py runs/experiments/transformer-averaged

Michel, Levy & Neubig (2019, "Are Sixteen Heads Really Better than One?") masked the heads of trained
Transformers at test time: most single heads could be removed without a significant change of BLEU,
many layers could be reduced to one head, and the encoder-decoder (cross) attention depended on
having several heads more than the self-attentions did. Voita et al. (2019) found a few specialised
heads doing most of the work. Here, with the model of docs/transformer.md (3 encoder and 3 decoder
layers of 4 heads: 36 heads in all):

1. every head masked alone: BLEU of the dev set (Multi30k val, greedy), against all heads on;
2. heads masked cumulatively, least important first (by step 1's dev BLEU, so the test set plays
   no part in the order): BLEU of test_2016 (beam 5) at each count, with the paired bootstrap
   against all heads; then again in the order of Michel et al.'s own importance score, the dev
   set's summed |dL/d xi_h| for a gate xi_h on each head (normalized per layer);
3. each kind (encoder, decoder, cross) reduced to its most important head in every layer, the
   others on: test BLEU; and every cross-attention head off (the decoder then cannot read the
   source at all: the floor);
4. the roles Voita et al. found in the encoder's important heads, for every encoder head over the
   dev sources: how often a token's most attended token is the one before it or after it
   ("positional": 90 % of the time or more, as they define it), and how often it is the sentence's
   rarest piece (by the training sources' piece counts), beside the head's importance of step 1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def bleu(model, sources: list[str], references: list[str], beam: int, heads) -> tuple[float, list[str]]:
    import sacrebleu

    model.mask_heads(heads)
    hypotheses = [t.text for t in model.translate(sources, beam=beam, batch_size=64)]
    return sacrebleu.corpus_bleu(hypotheses, [references]).score, hypotheses


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
    return test()[1]["BLEU"][1].p_value


def name(head) -> str:
    return ".".join(map(str, head))


def single_heads(model, dev, heads) -> tuple[float, dict]:
    """Step 1: dev BLEU with all heads on, and with each head masked alone."""
    base, _ = bleu(model, *dev, 1, [])
    alone = {head: bleu(model, *dev, 1, [head])[0] for head in heads}
    print(f"\n1. each head masked alone: dev BLEU (greedy; all heads on: {base:.2f}), change per head")
    layers = sorted({(kind, layer) for kind, layer, _ in heads})
    for kind, layer in layers:
        row = [alone[h] - base for h in heads if h[:2] == (kind, layer)]
        print(f"   {kind:>7} layer {layer}: " + "  ".join(f"{change:+6.2f}" for change in row))
    changes = sorted(alone[h] - base for h in heads)
    print(
        f"   {sum(c > -0.5 for c in changes)} of {len(heads)} heads cost less than 0.5 BLEU alone; the worst "
        f"{changes[0]:+.2f}, the best {changes[-1]:+.2f}"
    )
    return base, alone


def cumulative(model, test, order, counts: list[int], step: str = "2"):
    """Step 2: the ``count`` least important heads masked together, test BLEU (beam 5)."""
    print(f"\n{step}. heads masked cumulatively, least important (on dev) first: test_2016 BLEU, beam 5")
    print(f"   {'masked':>6} {'BLEU':>6} {'p':>6}  by kind (encoder/decoder/cross)")
    base = None
    for count in counts:
        masked = order[:count]
        score, hypotheses = bleu(model, *test, 5, masked)
        if base is None:
            base = hypotheses
        p = f"{significance(base, hypotheses, test[1]):6.3f}" if count else f"{'':>6}"
        kinds = "/".join(str(sum(h[0] == kind for h in masked)) for kind in ("encoder", "decoder", "cross"))
        print(f"   {count:>6} {score:6.2f} {p}  {kinds}", flush=True)


def gradient_importance(model, dev, heads) -> dict:
    """Michel et al.'s importance of each head: I_h = sum over the dev pairs of |dL/d xi_h|, xi_h the
    head's gate (1: on) and L the teacher-forced cross-entropy, normalized per layer (l2)."""
    import torch

    from attnmt.data.batching import forced_batches
    from attnmt.seq2seq.heads import KINDS, attentions
    from attnmt.seq2seq.training import sequence_loss

    net = model.model
    gates = {(kind, layer): attention for kind in KINDS for layer, attention in enumerate(attentions(net, kind))}
    for attention in gates.values():
        attention.head_mask = torch.ones(attention.heads, requires_grad=True)
    src_ids, tgt_ids = model.src_subwords.encode(dev[0]), model.tgt_subwords.encode(dev[1])
    totals = {key: torch.zeros(attention.heads) for key, attention in gates.items()}
    with torch.enable_grad():
        for _, batch in forced_batches(src_ids, tgt_ids, 64, torch.device("cpu")):
            loss = sequence_loss(net, batch)
            grads = torch.autograd.grad(loss, [a.head_mask for a in gates.values()])
            for key, grad in zip(gates, grads):
                totals[key] += grad.abs()
    for attention in gates.values():
        attention.head_mask = None
    importance = {}
    for (kind, layer), total in totals.items():
        total = total / total.norm()
        importance.update({(kind, layer, head): float(total[head]) for head in range(len(total))})
    return importance


def one_head_a_layer(model, test, alone, heads):
    """Step 3: a kind's layers reduced to their best head each; then every cross head off."""
    print("\n3. one head a layer (the most important on dev), one kind at a time: test_2016 BLEU, beam 5")
    for kind in ("encoder", "decoder", "cross"):
        layers = sorted({layer for k, layer, _ in heads if k == kind})
        kept = {max((h for h in heads if h[:2] == (kind, layer)), key=lambda h: -alone[h]) for layer in layers}
        masked = [h for h in heads if h[0] == kind and h not in kept]
        score, _ = bleu(model, *test, 5, masked)
        print(f"   {kind:>7}: kept {', '.join(sorted(map(name, kept)))}; {len(masked)} masked: BLEU {score:.2f}")
    score, _ = bleu(model, *test, 5, [h for h in heads if h[0] == "cross"])
    print(f"   every cross-attention head masked (the decoder blind to the source): BLEU {score:.2f}")


def encoder_roles(model, sources: list[str], train_sources: list[str], heads) -> dict:
    """Step 4: for each encoder head, the share of queries (the sentence's pieces, not its </s>)
    whose most attended piece is the previous one, the next one, and the sentence's rarest."""
    from collections import Counter

    import torch

    from attnmt.data.batching import make_batch
    from attnmt.data.subwords import BOS

    counts = Counter(piece for ids in model.source_ids(train_sources) for piece in ids)
    hits = {head: torch.zeros(3) for head in heads if head[0] == "encoder"}
    queries = 0
    ids = [row for row in model.source_ids(sources) if len(row) >= 2]
    for start in range(0, len(ids), 64):
        chunk = ids[start : start + 64]
        batch = make_batch(chunk)
        with torch.no_grad():
            maps = model.model.attention_maps(batch.src, batch.src_lengths, torch.full((len(chunk), 1), BOS))
        top = maps["encoder"].argmax(-1)  # (B,L,H,S): each query's most attended key
        for b, row in enumerate(chunk):
            n = len(row)
            rarest = min(range(n), key=lambda i: counts[row[i]])
            positions = torch.arange(n)
            for (_, layer, head), hit in hits.items():
                most = top[b, layer, head, :n]
                hit += torch.stack(
                    [(most == positions - 1).sum(), (most == positions + 1).sum(), (most == rarest).sum()]
                ).float()
            queries += n
    return {head: (hit / queries).tolist() for head, hit in hits.items()}


def print_roles(roles: dict, alone: dict, base: float):
    print(
        "\n4. encoder heads: importance (dev BLEU lost when masked alone) and roles (share of tokens whose most "
        "attended token is ...)"
    )
    print(f"   {'head':<12} {'lost':>6} {'previous':>9} {'next':>6} {'rarest':>7}  role")
    for head in sorted(roles, key=lambda h: alone[h]):  # most important first
        previous, following, rarest = roles[head]
        role = "positional" if max(previous, following) >= 0.9 else ""
        print(f"   {name(head):<12} {base - alone[head]:6.2f} {previous:9.0%} {following:6.0%} {rarest:7.0%}  {role}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a trained Transformer's folder")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--data", default=str(MULTI30K))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--roles-only", action="store_true", help="step 4 alone (with step 1's importance)")
    args = parser.parse_args(argv)
    from requirements import check, multi30k, trained_model

    check(
        "benchmarks/head_pruning.py",
        trained_model(args.model, "the Transformer whose heads are masked"),
        multi30k(
            args.data, ["val.de.gz", "val.en.gz", "test_2016_flickr.de.gz", "test_2016_flickr.en.gz", "train.de.gz"]
        ),
    )
    import torch

    from attnmt.data.corpus import read_lines
    from attnmt.seq2seq.heads import every_head

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    dev = (read_lines(data / "val.de.gz"), read_lines(data / "val.en.gz"))
    test = (read_lines(data / "test_2016_flickr.de.gz"), read_lines(data / "test_2016_flickr.en.gz"))
    model = attnmt.load(args.model, args.checkpoint)
    heads = every_head(model.model)
    started = time.perf_counter()
    print(f"{args.model} ({args.checkpoint}): {len(heads)} heads")
    base, alone = single_heads(model, dev, heads)
    if args.roles_only:
        print_roles(encoder_roles(model, dev[0], read_lines(data / "train.de.gz"), heads), alone, base)
        return
    order = sorted(heads, key=lambda h: base - alone[h])  # least important (least lost, or most gained) first
    print("   order (least important first): " + " ".join(name(h) for h in order))
    cumulative(model, test, order, list(range(0, len(heads) + 1, 4)))
    importance = gradient_importance(model, dev, heads)
    by_gradient = sorted(heads, key=lambda h: importance[h])
    print(
        "\n   the order of Michel et al.'s gradient importance (dev, teacher forced), least first: "
        + " ".join(name(h) for h in by_gradient)
    )
    cumulative(model, test, by_gradient, list(range(0, len(heads) + 1, 4)), "2b")
    one_head_a_layer(model, test, alone, heads)
    model.mask_heads([])
    print_roles(encoder_roles(model, dev[0], read_lines(data / "train.de.gz"), heads), alone, base)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
