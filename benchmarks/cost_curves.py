"""How cost grows: training throughput against batch size and threads, decoding time against
sentence length, for the rnn-bahdanau and transformer-small configurations.

    python benchmarks/cost_curves.py                       # both parts, a few minutes
    python benchmarks/cost_curves.py --part train          # or decode; results are merged
    python benchmarks/cost_curves.py --plot-only           # redraw the figure from results.json
    python benchmarks/cost_curves.py --part profile        # where the time of beam search goes

Training: the project's own Trainer (model construction, bf16 autocast, loss, fused Adam,
clipping) on real Multi30k training batches of 16, 32, 64 and 128 sentences, with 1 and 2
threads: --warmup steps, then --steps timed steps (wall clock of TrainingLoop.train_step).
The subwords are those of the trained benchmark model (copied, nothing is retrained).

Decoding: the trained benchmark models, greedy and beam 5, on batches of 16 sources of exactly N
subword pieces (+ EOS), cut from the concatenated pieces of the test_2016_flickr sentences; the
output is capped at the decoding defaults (1.5 N + 10 tokens). Each point is the best of
--repeats runs; the mean output length is reported, since the decoder's cost follows it.

Writes runs/cost-curves/results.json and docs/img/cost-curves.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
OUT = REPO / "runs" / "cost-curves"
FIGURE = REPO / "docs" / "img" / "cost-curves.png"
MODELS = {  # configuration -> trained model (its subwords for training, its weights for decoding)
    "rnn-bahdanau": REPO / "runs" / "bench-rnn-bahdanau" / "model",
    "transformer-small": REPO / "runs" / "bench-transformer-small" / "model",
}
BATCH_SIZES = [16, 32, 64, 128]
THREADS = [1, 2]
LENGTHS = [5, 10, 20, 40, 60, 80, 100]


# ----------------------------------------------------------------------------- training


def trainer_for(name: str):
    """A Trainer of the configuration, in a scratch folder holding a copy of the benchmark
    model's subwords (so none are trained), without dev set (no validation is run)."""
    from attnmt.core.config import load_config
    from attnmt.training import Trainer

    config = load_config(REPO / "configs" / f"{name}.yaml")
    folder = OUT / f"train-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(MODELS[name] / "spm", folder / "spm")
    config.experiment_dir = folder
    config.data.dev = None
    config.training.precision = "bf16"  # as benchmarks/run.py
    return Trainer(config, log=lambda message: None, progress=False)


def time_steps(trainer, batches: list[list[int]], warmup: int) -> dict:
    """Wall clock of TrainingLoop.train_step on ``batches``, the first ``warmup`` of them untimed."""
    from attnmt.translation.training import translation_batch

    times, sentences, tokens = [], 0, 0
    for i, indices in enumerate(batches):
        batch = translation_batch(trainer.data.train, indices)
        started = time.perf_counter()
        _, step_tokens = trainer.loop.train_step(batch)
        if i >= warmup:
            times.append(time.perf_counter() - started)
            sentences += len(indices)
            tokens += step_tokens
    seconds = sum(times)
    return {
        "sentences_per_s": sentences / seconds,
        "tokens_per_s": tokens / seconds,
        "ms_per_step": 1000 * statistics.median(times),
        "sentences": sentences,
        "tokens": tokens,
    }


def training_curves(name: str, warmup: int, steps: int) -> list[dict]:
    from attnmt.data.batching import epoch_batches

    trainer = trainer_for(name)
    d, seed = trainer.config.data, trainer.config.training.seed
    rows = []
    for size in BATCH_SIZES:
        # The same real batches (the first of epoch 0 at this size) for both thread counts.
        batches = epoch_batches(trainer.loop.sizes, size, None, d.bucket_batches, seed, 0)[: warmup + steps]
        for threads in THREADS:
            torch.set_num_threads(threads)
            row = {"model": name, "batch_size": size, "threads": threads, **time_steps(trainer, batches, warmup)}
            print(
                f"  train {name:17s} batch {size:3d}, {threads} thread(s): {row['sentences_per_s']:6.1f} sent/s, "
                f"{row['tokens_per_s']:7.0f} tok/s, {row['ms_per_step']:6.0f} ms/step",
                flush=True,
            )
            rows.append(row)
    shutil.rmtree(OUT / f"train-{name}", ignore_errors=True)
    return rows


# ----------------------------------------------------------------------------- decoding


def sources_of_length(subwords, length: int, count: int) -> list[list[int]]:
    """``count`` sources of exactly ``length`` pieces: consecutive cuts of the test sentences'
    pieces laid end to end (so short lengths are sentence fragments, long ones several sentences)."""
    from attnmt.data.corpus import read_lines

    stream = [i for ids in subwords.encode(read_lines(MULTI30K / "test_2016_flickr.de.gz")) for i in ids]
    return [stream[k * length : (k + 1) * length] for k in range(count)]


def decoding_curves(name: str, batch: int, repeats: int, threads: int) -> list[dict]:
    from attnmt.data.batching import make_batch
    from attnmt.seq2seq.search import decode

    torch.set_num_threads(threads)
    translator = attnmt.load(MODELS[name])
    rows = []
    settings = translator.config.decoding.model_copy(update={"max_length_ratio": 1.5, "max_length_offset": 10})
    for length in LENGTHS:
        sample = make_batch(sources_of_length(translator.src_subwords, length, batch))
        for beam in (1, 5):
            best, outputs = float("inf"), None
            for _ in range(repeats):
                started = time.perf_counter()
                with torch.inference_mode():
                    outputs = decode(translator.model, sample.src, sample.src_lengths, settings, beam=beam)
                best = min(best, time.perf_counter() - started)
            out_tokens = statistics.mean(len(h[0].tokens) for h in outputs)
            row = {
                "model": name,
                "length": length,
                "beam": beam,
                "batch": batch,
                "threads": threads,
                "ms_per_sentence": 1000 * best / batch,
                "mean_output_tokens": out_tokens,
                "ms_per_output_token": 1000 * best / batch / out_tokens,
            }
            print(
                f"  decode {name:17s} length {length:3d}, beam {beam}: {row['ms_per_sentence']:7.2f} ms/sentence, "
                f"{out_tokens:5.1f} output tokens, {row['ms_per_output_token']:.3f} ms/token",
                flush=True,
            )
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- beam profile


class PartTimer:
    """CPU time per part, exclusive of the parts nested in it: wraps methods and modules. CPU time
    of the process, not wall clock, so that other jobs on the machine do not count."""

    def __init__(self):
        self.seconds, self.calls, self._inner = {}, {}, []

    def wrap(self, label: str, fn):
        def timed(*args, **kwargs):
            started = time.process_time()
            self._inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.process_time() - started
                exclusive = elapsed - self._inner.pop()
                self.seconds[label] = self.seconds.get(label, 0.0) + exclusive
                self.calls[label] = self.calls.get(label, 0) + 1
                if self._inner:
                    self._inner[-1] += elapsed

        return timed


def profile_beam(name: str, batch: int, beam: int, threads: int, rounds: int) -> dict:
    """Where the time of one beam search over the first ``batch`` test sentences goes: each part
    of the model timed by wrapping it (CPU time, exclusive of nested parts), then the operators'
    self time from torch.profiler."""
    from attnmt.data.batching import make_batch
    from attnmt.data.corpus import read_lines
    from attnmt.seq2seq.search import decode

    torch.set_num_threads(threads)
    translator = attnmt.load(MODELS[name])
    model, dc = translator.model, translator.config.decoding
    sample = make_batch(translator.src_subwords.encode(read_lines(MULTI30K / "test_2016_flickr.de.gz")[:batch]))

    def run():
        with torch.inference_mode():
            return decode(model, sample.src, sample.src_lengths, dc, beam=beam)

    run()  # warm-up: kernels for these shapes
    timer, decoder = PartTimer(), model.decoder
    parts = [
        (model, "encode", "encoder (embeddings, bidirectional GRU, attention keys)"),
        (model.tgt_embed, "forward", "target embeddings"),
        (decoder.W_y, "forward", "GRU input products (W_y y, W_ctx c)"),
        (decoder.W_ctx, "forward", "GRU input products (W_y y, W_ctx c)"),
        (decoder, "_attend", "attention (scores, softmax, context)"),
        (decoder.rnn, "forward", "GRU cell (W_hh s, gates)"),
        (decoder, "_attentional", "attentional vector tanh(W_c [c; s])"),
        (model.generator, "forward", "output layer 512 -> 8,000"),
        (model, "next_token_log_probs", "log_softmax and PAD/BOS masking"),
        (decoder, "step", "decoder step glue (gate sums, new state)"),
    ]
    for obj, method, label in parts:
        setattr(obj, method, timer.wrap(label, getattr(obj, method)))
    total = []
    try:
        for _ in range(rounds):
            started = time.process_time()
            outputs = run()
            total.append(time.process_time() - started)
    finally:
        for obj, method, _ in parts:
            delattr(obj, method)  # back to the class's method
    seconds = sum(total)
    rest = seconds - sum(timer.seconds.values())
    table = {label: 1000 * s / rounds for label, s in timer.seconds.items()}
    table["beam search outside the model (top-k, reordering, finished hypotheses, Python)"] = 1000 * rest / rounds
    steps = timer.calls["output layer 512 -> 8,000"] // rounds

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    op_table = [{"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1000} for e in ops]
    out_tokens = statistics.mean(len(h[0].tokens) for h in outputs)
    print(
        f"\nbeam {beam}, {name}, first {batch} test sentences, {threads} threads: "
        f"{1000 * min(total):.0f} ms CPU, best of {rounds} ({batch / min(total):.0f} sentences per CPU second), "
        f"{steps} decoder steps, "
        f"{out_tokens:.1f} output tokens per sentence"
    )
    print("\n| part | CPU ms per beam search | share |\n|---|---|---|")
    for label, ms in sorted(table.items(), key=lambda item: -item[1]):
        print(f"| {label} | {ms:.0f} | {ms / (1000 * seconds / rounds):.0%} |")
    print("\n| operator (torch.profiler, one run) | calls | self ms |\n|---|---|---|")
    for row in op_table:
        print(f"| {row['op']} | {row['calls']} | {row['self_ms']:.1f} |")
    return {
        "model": name,
        "batch": batch,
        "beam": beam,
        "threads": threads,
        "rounds": rounds,
        "ms": [1000 * t for t in total],
        "steps": steps,
        "mean_output_tokens": out_tokens,
        "parts_ms": table,
        "operators": op_table,
    }


# ----------------------------------------------------------------------------- report


def print_tables(results: dict):
    if results.get("train"):
        print("\n| model | batch | threads | sentences/s | target tokens/s | ms/step (median) |")
        print("|---|---|---|---|---|---|")
        for r in results["train"]:
            print(
                f"| {r['model']} | {r['batch_size']} | {r['threads']} | {r['sentences_per_s']:.0f} | "
                f"{r['tokens_per_s']:,.0f} | {r['ms_per_step']:.0f} |"
            )
    if results.get("decode"):
        print("\n| model | source pieces | search | ms/sentence | mean output tokens | ms/output token |")
        print("|---|---|---|---|---|---|")
        for r in results["decode"]:
            search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
            print(
                f"| {r['model']} | {r['length']} | {search} | {r['ms_per_sentence']:.1f} | "
                f"{r['mean_output_tokens']:.1f} | {r['ms_per_output_token']:.3f} |"
            )


def plot(results: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    colors = {"rnn-bahdanau": "tab:blue", "transformer-small": "tab:orange"}
    train, dec = results.get("train", []), results.get("decode", [])
    ax = axes[0]
    for name in colors:
        for threads, style in zip(THREADS, ("--", "-")):
            rows = [r for r in train if r["model"] == name and r["threads"] == threads]
            if rows:
                ax.plot(
                    [r["batch_size"] for r in rows],
                    [r["sentences_per_s"] for r in rows],
                    style,
                    marker="o",
                    color=colors[name],
                    label=f"{name}, {threads} thread{'s' if threads > 1 else ''}",
                )
    ax.set(
        xscale="log", xlabel="batch size (sentences)", ylabel="training sentences/s", title="Training throughput (bf16)"
    )
    ax.set_xticks(BATCH_SIZES, [str(b) for b in BATCH_SIZES])
    ax.minorticks_off()
    for ax, key, label in (
        (axes[1], "ms_per_sentence", "decoding ms per sentence"),
        (axes[2], "ms_per_output_token", "decoding ms per output token"),
    ):
        for name in colors:
            for beam, style in ((1, "--"), (5, "-")):
                rows = [r for r in dec if r["model"] == name and r["beam"] == beam]
                if rows:
                    ax.plot(
                        [r["length"] for r in rows],
                        [r[key] for r in rows],
                        style,
                        marker="o",
                        color=colors[name],
                        label=f"{name}, {'greedy' if beam == 1 else 'beam 5'}",
                    )
        ax.set(
            xlabel="source length (subword pieces)",
            ylabel=label,
            title=f"Decoding, batch of {dec[0]['batch'] if dec else 16}, 2 threads",
        )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    print(f"figure: {FIGURE}")


def check_requirements(args):
    """The trained benchmark models and the Multi30k files the chosen parts read, before any is timed."""
    from requirements import check, files, trained_model

    if args.plot_only:  # the figure of results.json: nothing else
        return
    names = ["test_2016_flickr.de.gz"] + (["train.de.gz", "train.en.gz"] if args.part in ("train", "all") else [])
    models = ["rnn-bahdanau"] if args.part == "profile" else args.models
    check(
        "benchmarks/cost_curves.py",
        [
            trained_model(
                MODELS[name],
                f"the trained {name} benchmark model",
                f"train it first: python benchmarks/run.py --config configs/{name}.yaml",
            )
            for name in models
        ],
        files(MULTI30K, names, "Multi30k"),
    )


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--part",
        choices=["train", "decode", "all", "profile"],
        default="all",
        help="profile: where the time of a beam-5 decode of the RNN goes (not in 'all')",
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--warmup", type=int, default=3, help="untimed training steps per point")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per point")
    parser.add_argument("--batch", type=int, default=16, help="sentences per decoding batch")
    parser.add_argument("--repeats", type=int, default=3, help="decoding runs per point (the best is kept)")
    parser.add_argument("--threads", type=int, default=2, help="threads for decoding")
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args(argv)
    check_requirements(args)
    path = OUT / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    if not args.plot_only:
        results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results["torch"] = torch.__version__
        if args.part in ("train", "all"):
            rows = [r for r in results.get("train", []) if r["model"] not in args.models]
            for name in args.models:
                rows += training_curves(name, args.warmup, args.steps)
            results["train"] = rows
        if args.part in ("decode", "all"):
            rows = [r for r in results.get("decode", []) if r["model"] not in args.models]
            for name in args.models:
                rows += decoding_curves(name, args.batch, args.repeats, args.threads)
            results["decode"] = rows
        if args.part == "profile":
            results["beam_profile"] = profile_beam("rnn-bahdanau", 64, 5, args.threads, args.repeats)
        OUT.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2))
    print_tables(results)
    plot(results)


if __name__ == "__main__":
    main()
