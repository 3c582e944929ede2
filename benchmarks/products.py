"""The products of a decoding step on a CPU: PyTorch's F.linear (MKL's sgemm) against attnmt's
inference products (attnmt.core.speed.linear: oneDNN on weights reordered once), on the shapes of
the models attnmt decodes, alternated in one sitting. Is the packed product faster on this CPU?

    python benchmarks/products.py                 # 2 threads, 5 rounds
    python benchmarks/products.py --threads 1 --rounds 9
    flock -x LOCKFILE python benchmarks/products.py   # alone on the machine

The shapes (rows x inputs -> outputs), each at 1, 8, 16, 32 and 64 rows (a step's batch: sentences,
or sentences x beam; a search drops the sentences that have ended, so the rows shrink):
  - OPUS-MT's Transformer (benchmarks/hub.py, d_model 512, feed-forward 2,048, 15,259 pieces): the
    attention's 512 -> 512, the feed-forward's 512 -> 2,048 and 2,048 -> 512, the output layer's
    512 -> 15,259;
  - configs/rnn-bahdanau.yaml (8,000 pieces): the GRU's 512 -> 1,536, the attentional vector's
    1,024 -> 512, the output layer's 512 -> 8,000.
Random float32 weights and inputs; "packed" is speed.linear as decoding calls it, which keeps
F.linear for the weights and row counts where the packed one does not pay (PACKED_MIN_WEIGHT). Each round times
every shape both ways (F.linear first in odd rounds, the packed product first in even ones),
repeating each product for at least --seconds; the median over the rounds is reported, with the
ratio F.linear / packed (above 1: the packed product is faster) and, as a check, the largest
difference between the two results. Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import time

import attnmt  # noqa: F401 (before torch: OpenMP's threads wait as in attnmt's commands)
import torch
import torch.nn.functional as F

from attnmt.core import speed, threads

SHAPES = {
    "Transformer attention 512 -> 512": (512, 512),
    "Transformer feed-forward 512 -> 2,048": (512, 2048),
    "Transformer feed-forward 2,048 -> 512": (2048, 512),
    "Transformer output layer 512 -> 15,259": (512, 15259),
    "RNN GRU 512 -> 1,536": (512, 1536),
    "RNN attentional 1,024 -> 512": (1024, 512),
    "RNN output layer 512 -> 8,000": (512, 8000),
}
ROWS = (1, 8, 16, 32, 64)


def timed(product, seconds: float) -> float:
    """Seconds per call of ``product``, over at least ``seconds`` of calls (after one untimed)."""
    product()
    calls, started = 0, time.perf_counter()
    while True:
        product()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / calls


def cpu() -> str:
    model = "unknown CPU"
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    for flag, isa in (("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2")):
        if flag in flags:
            return f"{model} ({isa})"
    return f"{model} (no AVX2)"


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds; the median is kept (5)")
    parser.add_argument("--seconds", type=float, default=0.2, help="time of each measurement, at least (0.2)")
    args = parser.parse_args(argv)
    if not speed._has_packed_product():
        raise SystemExit("benchmarks/products.py: this PyTorch has no oneDNN linear product (torch.ops.mkldnn)")
    torch.set_num_threads(args.threads)
    threads.choose(args.threads)
    torch.manual_seed(0)
    cases = []
    for name, (inputs, outputs) in SHAPES.items():
        weight, bias = torch.randn(outputs, inputs) * inputs**-0.5, torch.randn(outputs)
        for rows in ROWS:
            cases.append((name, rows, torch.randn(rows, inputs), weight, bias))
    times = {(name, rows): ([], []) for name, rows, *_ in cases}
    largest = 0.0
    with torch.inference_mode():
        for round_ in range(args.rounds):
            for name, rows, x, weight, bias in cases:
                plain = lambda x=x, weight=weight, bias=bias: F.linear(x, weight, bias)  # noqa: E731
                packed = lambda x=x, weight=weight, bias=bias: speed.linear(x, weight, bias)  # noqa: E731
                order = (0, 1) if round_ % 2 == 0 else (1, 0)
                for which in order:
                    times[name, rows][which].append(timed((plain, packed)[which], args.seconds))
                if round_ == 0:
                    largest = max(largest, (plain() - packed()).abs().max().item())
    print(
        f"\n{cpu()}, {args.threads} threads, torch {torch.__version__}; median of {args.rounds} alternated "
        f"rounds; {time.strftime('%Y-%m-%d %H:%M %Z')}\n"
    )
    print("| product | rows | F.linear (ms) | packed (ms) | F.linear / packed |\n|---|---:|---:|---:|---:|")
    ratios = []
    for (name, rows), (plain, packed) in times.items():
        a, b = statistics.median(plain) * 1e3, statistics.median(packed) * 1e3
        ratios.append(a / b)
        print(f"| {name} | {rows} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")
    print(
        f"\nF.linear / packed: {min(ratios):.2f}x to {max(ratios):.2f}x, geometric mean "
        f"{statistics.geometric_mean(ratios):.2f}x; largest difference of the results {largest:.1e}"
    )


if __name__ == "__main__":
    main()
