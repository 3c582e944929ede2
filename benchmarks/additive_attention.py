"""Additive attention's scores on a CPU: the textbook v^T tanh(a + b) against attnmt.core.speed.v_tanh
(2 v^T sigmoid(2a + 2b) - sum(v), a few rows at a time), and PyTorch's tanh against its sigmoid.

    flock /tmp/attnmt-bench.lock python benchmarks/additive_attention.py [--threads 2] [--rounds 5]

Shapes of a beam-5 step of the rnn-bahdanau model over a batch of 64 sentences: 320 rows, a source
of 36 pieces, attention size 512 (the query's term (320, 1, 1, 512) over the keys (320, 1, 36, 512)),
and of a training step: 64 rows, forward and backward. The two ways take turns in each round; the
best round of each is printed, with their ratio. In training, v_tanh's backward pass computes the
energies again instead of keeping them (its memory: docs/performance.md): the last two rows time that
against autograd keeping them, for the scores alone and for whole training steps of the rnn-bahdanau
model (configs/rnn-bahdanau.yaml, a vocabulary of 8,000, four random batches of 64 pairs of 8 to 55
pieces).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch
import torch.nn.functional as F

from attnmt.core import speed


def best_ms(function, rounds: int, calls: int = 20) -> float:
    function()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return min(times)


def textbook(v, a, b):
    return F.linear(torch.tanh(a + b), v).squeeze(-1)


def compare(label: str, pairs: list[tuple[str, Callable]], rounds: int, calls: int = 20):
    """Each function timed ``rounds`` times, the functions taking turns; prints their best and the ratio."""
    best = {name: float("inf") for name, _ in pairs}
    for _ in range(rounds):
        for name, function in pairs:
            best[name] = min(best[name], best_ms(function, 1, calls))
    (_, slow), (_, fast) = best.items()
    print(f"| {label} | {slow:.2f} | {fast:.2f} | {slow / fast:.2f}x |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {args.threads} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, best of {args.rounds} rounds (ms)\n"
    )
    print("| what | textbook / tanh, ms | v_tanh / sigmoid, ms | ratio |")
    print("|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(1 << 20, dtype=dtype)
        name = "float32" if dtype == torch.float32 else "bf16"
        compare(
            f"tanh against sigmoid, 2^20 elements, {name}",
            [("tanh", lambda x=x: torch.tanh(x)), ("sigmoid", lambda x=x: torch.sigmoid(x))],
            args.rounds,
        )
    v = torch.randn(1, 512)
    query, keys = torch.randn(320, 1, 1, 512), torch.randn(320, 1, 36, 512)
    compare(
        "scores of a beam-5 decoder step, 320 x 36 x 512, float32",
        [("textbook", lambda: textbook(v, query, keys)), ("v_tanh", lambda: speed.v_tanh(v, query, keys))],
        args.rounds,
    )
    query, keys = torch.randn(64, 1, 1, 512, requires_grad=True), torch.randn(64, 1, 36, 512, requires_grad=True)

    def backward_of(scores):
        return lambda: torch.autograd.grad(scores(v, query, keys).sum(), (query, keys))

    compare(
        "scores of a training step with backward, 64 x 36 x 512, float32",
        [("textbook", backward_of(textbook)), ("v_tanh", backward_of(speed.v_tanh))],
        args.rounds,
    )
    print("\n| what | energies kept (autograd), ms | energies recomputed (v_tanh), ms | ratio |")
    print("|---|---|---|---|")
    compare(
        "scores of a training step with backward, 64 x 36 x 512, float32",
        [("kept", backward_of(speed._energies)), ("recomputed", backward_of(speed.v_tanh))],
        args.rounds,
    )
    steps = training_steps()
    compare(
        "four training steps of rnn-bahdanau, float32",
        [("kept", lambda: steps(speed._energies)), ("recomputed", lambda: steps(speed.v_tanh))],
        args.rounds,
        calls=1,
    )


def training_steps() -> Callable:
    """A function that runs four training steps of the rnn-bahdanau model with ``scores`` as its
    additive attention's v_tanh."""
    from pathlib import Path

    from attnmt.core.config import load_config
    from attnmt.data.batching import training_batch
    from attnmt.seq2seq import attention, build_model
    from attnmt.seq2seq.training import sequence_loss

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "rnn-bahdanau.yaml")
    model = build_model(config.model, 8000, 8000).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    random = torch.Generator().manual_seed(0)

    def pieces(n: int) -> list[int]:
        return torch.randint(4, 8000, (n,), generator=random).tolist()

    lengths = [torch.randint(8, 56, (64,), generator=random).tolist() for _ in range(4)]
    batches = [training_batch([pieces(n) for n in row], [pieces(n) for n in row]) for row in lengths]

    def steps(scores: Callable):
        kept, attention.speed.v_tanh = attention.speed.v_tanh, scores
        try:
            for batch in batches:
                optimizer.zero_grad(set_to_none=True)
                (sequence_loss(model, batch, 0.1) / batch.target_tokens).backward()
                optimizer.step()
        finally:
            attention.speed.v_tanh = kept

    return steps


if __name__ == "__main__":
    main()
