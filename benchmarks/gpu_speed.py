"""What attnmt's GPU paths bring, each against its textbook path on the same GPU, in one run.

    python benchmarks/gpu_speed.py --data ../shared/data/multi30k --steps 400

Trains configs/rnn-bahdanau.yaml (Multi30k de->en, batch 64 sentences) for --steps steps twice on
the GPU: with the decoder and loss as CUDA graphs (training.cuda_graphs, the default) and without;
then decodes test_2016_flickr with the first model, greedy and beam 5, with the fixed-shape search
of attnmt.seq2seq.fast_decoding (CUDA graphs) and with the reference search of attnmt.seq2seq.decoding
(``speed.plain()``). Prints sentences/s of each and the ratios; the same for --precision bf16
with --bf16. For the comparison with OpenNMT-py, see benchmarks/peers.py --device cuda.

    python benchmarks/gpu_speed.py --data DIR --transformer --steps 1000

trains configs/transformer-small.yaml instead, with and without graphs, and decodes test_2016 with
the first model three ways: the fixed-shape search with the Transformer's cache made for the whole search
(transformer.FixedCache), each step a CUDA graph; the same search with the cache that grows a
position a step, every step eager (attnmt before the FixedCache); the reference search.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch

REPO = Path(__file__).resolve().parents[1]


def profiled(steps: int):
    """Prints where the time of `steps` training steps goes (by the host's time per operation, and
    the GPU's busy time), measured after the first 200 steps (the shapes' captures): patches
    TrainingLoop.train_step to step a torch.profiler."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from attnmt.training.loop import TrainingLoop

    plain_step = TrainingLoop.train_step
    profiler = profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=200, warmup=5, active=steps, repeat=1),
    )

    def train_step(self, batch):
        result = plain_step(self, batch)
        profiler.step()
        return result

    TrainingLoop.train_step = train_step
    profiler.start()
    return profiler


def train(
    args, out: Path, graphs: bool, precision: str, tokens: int | None = None, config_name: str = "rnn-bahdanau.yaml"
) -> dict:
    from attnmt.core.config import load_config
    from attnmt.training import train as train_config

    config = load_config(REPO / "configs" / config_name)
    data = Path(args.data).resolve()
    config.data.train.src, config.data.train.tgt = data / "train.de.gz", data / "train.en.gz"
    config.data.dev.src, config.data.dev.tgt = data / "val.de.gz", data / "val.en.gz"
    config.experiment_dir = out
    config.training.device, config.training.cuda_graphs, config.training.precision = args.device, graphs, precision
    config.training.max_steps, config.training.max_minutes = args.steps, None
    config.training.validate_every = args.steps  # one validation, at the end
    config.data.batch_tokens = tokens
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    state = train_config(config, log=lambda line: None, progress=False)
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
    validation = [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["type"] == "valid"
    ][-1]
    # The loop's seconds include the validation at the end; its record's, written before, do not.
    return {
        "sentences_per_s": state.sentences / validation["seconds"],
        "seconds": validation["seconds"],
        "dev_bleu": validation["bleu"],
        "peak_memory_gb": peak,
    }


def decode(model_dir: Path, sources: list[str], beam: int, plain: bool, device: str) -> float:
    from attnmt.core import speed

    translator = attnmt.load(model_dir, device=device)
    with speed.plain() if plain else contextlib.nullcontext():
        translator.translate(sources[:64], beam=beam)  # warm-up: cuDNN and cuBLAS choose their kernels
        synchronize(device)
        started = time.perf_counter()
        translator.translate(sources, beam=beam, batch_size=64)
        synchronize(device)
    return len(sources) / (time.perf_counter() - started)


@contextlib.contextmanager
def growing_cache():
    """The Transformer's fixed-shape searches as before transformer.FixedCache: the cache grows a
    position a step, so no step is captured."""
    from attnmt.seq2seq.base import EncoderDecoder
    from attnmt.seq2seq.transformer import Transformer

    own = Transformer.init_fixed_state
    Transformer.init_fixed_state = EncoderDecoder.init_fixed_state
    try:
        yield
    finally:
        Transformer.init_fixed_state = own


def transformer_decoding(args, work: Path, sources: list[str]) -> dict:
    """Trains configs/transformer-small.yaml for --steps with graphs and without, then decodes with
    each search (see the module's docstring); sentences/s of each."""
    results = {}
    for name, graphs in (("transformer", True), ("transformer-eager", False)):
        results[f"train_{name}"] = train(args, work / name, graphs, "fp32", config_name="transformer-small.yaml")
        print(f"training, {name}: {results[f'train_{name}']}", flush=True)
    ratio = results["train_transformer"]["sentences_per_s"] / results["train_transformer-eager"]["sentences_per_s"]
    print(f"training the Transformer, graphs / eager: {ratio:.2f}x", flush=True)
    for beam in (1, 5):
        results[f"beam{beam}_fixed_cache_graphs"] = decode(work / "transformer", sources, beam, False, args.device)
        with growing_cache():
            results[f"beam{beam}_growing_cache_eager"] = decode(work / "transformer", sources, beam, False, args.device)
        results[f"beam{beam}_reference"] = decode(work / "transformer", sources, beam, True, args.device)
        fixed, growing, reference = (
            results[f"beam{beam}_{name}"] for name in ("fixed_cache_graphs", "growing_cache_eager", "reference")
        )
        print(
            f"beam {beam}: fixed cache, graphs {fixed:.0f} sentences/s; growing cache, eager {growing:.0f} "
            f"({fixed / growing:.2f}x); reference {reference:.0f} ({fixed / reference:.2f}x)",
            flush=True,
        )
    return results


def first_calls(model_dir: Path, sources: list[str], device: str, profile: bool):
    """Where a decoding's first call after loading loses its time: a fresh process translates one
    sentence greedily (the GPU's first use: libraries, kernels), then the test set greedily twice and
    with beam 5 twice, each timed. With ``profile``, the process's first call, beam 5 over the test
    set, runs under torch.profiler instead, and its busiest operations print."""

    started = time.perf_counter()
    translator = attnmt.load(model_dir, device=device)
    synchronize(device)
    times = {"load": time.perf_counter() - started}
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiling

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profiling(activities=activities) as profiler:
            translator.translate(sources, beam=5, batch_size=64)
            synchronize(device)
        print(profiler.key_averages().table(sort_by="cpu_time_total", row_limit=40), flush=True)
        return times
    passes = [
        ("one_sentence", sources[:1], 1),
        ("greedy_1", sources, 1),
        ("greedy_2", sources, 1),
        ("beam5_1", sources, 5),
        ("beam5_2", sources, 5),
    ]
    for name, batch, beam in passes:
        started = time.perf_counter()
        translator.translate(batch, beam=beam, batch_size=64)
        synchronize(device)
        times[name] = time.perf_counter() - started
        print(f"{name}: {times[name]:.3f} s ({len(batch) / times[name]:.0f} sentences/s)", flush=True)
    return times


def decodings_after_loading(model_dir: Path, sources: list[str], beams: list[int], device: str) -> list[float]:
    """Loads the model, then translates ``sources`` with each beam size in turn (1: greedy): each
    one's sentences/s, timed as benchmarks/run.py times its decoding (after loading, batch 64)."""

    translator = attnmt.load(model_dir, device=device)
    speeds = []
    for beam in beams:
        started = time.perf_counter()
        translator.translate(sources, beam=beam, batch_size=64)
        synchronize(device)
        speeds.append(len(sources) / (time.perf_counter() - started))
    return speeds


def fresh_processes(model_dir: Path, sources: list[str], device: str, rounds: int):
    """The decoding benchmark's figure with and without the device's first use: per round, beam 5
    alone in a new process, greedy alone in a new process, and greedy then beam 5 in one process
    (the beam search then finds the device warm)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for round_ in range(1, rounds + 1):
        for beams in ([5], [1], [1, 5]):
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                speeds = pool.submit(decodings_after_loading, model_dir, sources, beams, device).result()
            runs = [
                f"{'greedy' if beam == 1 else f'beam {beam}'} {speed:.0f} sentences/s"
                for beam, speed in zip(beams, speeds)
            ]
            print(f"round {round_}, one process: " + ", then ".join(runs), flush=True)


def synchronize(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def check_requirements(args):
    """The GPU, the Multi30k files and the model the chosen measurement reads, before it starts."""
    from requirements import check, cuda, multi30k, trained_model

    given = args.first_calls or args.fresh_processes  # a trained model, decoded only
    names = ["test_2016_flickr.de.gz"]
    if not given:
        names += [f"{split}.{lang}.gz" for split in ("train", "val") for lang in ("de", "en")]
    check(
        "benchmarks/gpu_speed.py",
        cuda("--device cuda", in_child=False) if args.device == "cuda" else None,  # (this process uses it anyway)
        multi30k(args.data, names),
        trained_model(given, "the model to decode (--first-calls, --fresh-processes)") if given else None,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--work", default=str(REPO / "runs" / "gpu-speed"))
    parser.add_argument("--bf16", action="store_true", help="also train with precision bf16")
    parser.add_argument("--batch-tokens", type=int, default=None, help="also train on batches of this many tokens")
    parser.add_argument("--sentences", type=int, default=None, help="decode only the first N test sentences")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="STEPS",
        help="only profile STEPS training steps (after 200), with graphs: where the time goes",
    )
    parser.add_argument(
        "--first-calls",
        metavar="MODEL",
        default=None,
        help="only time MODEL's first translate calls after loading (see first_calls)",
    )
    parser.add_argument(
        "--profile-first", action="store_true", help="with --first-calls: profile the first call, beam 5"
    )
    parser.add_argument(
        "--fresh-processes",
        metavar="MODEL",
        default=None,
        help="only time MODEL's decoding in new processes, with and without a warm device",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --fresh-processes (default 3)")
    parser.add_argument(
        "--torch-capture",
        action="store_true",
        help="decoding captures graphs with torch.cuda.graph (attnmt.seq2seq.capture.LEAN_CAPTURE off)",
    )
    parser.add_argument(
        "--transformer",
        action="store_true",
        help="only train configs/transformer-small.yaml for --steps (graphs, eager) and time its "
        "decoding with the fixed cache and graphs, the growing cache, and the reference search",
    )
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a check of this script, nothing to measure)")
    args = parser.parse_args(argv)
    check_requirements(args)
    from attnmt.data.corpus import read_lines

    if args.torch_capture:
        from attnmt.seq2seq import capture

        capture.LEAN_CAPTURE = False
    if args.fresh_processes:
        sources = read_lines(Path(args.data) / "test_2016_flickr.de.gz")[: args.sentences]
        fresh_processes(Path(args.fresh_processes), sources, args.device, args.rounds)
        return
    if args.first_calls:
        sources = read_lines(Path(args.data) / "test_2016_flickr.de.gz")[: args.sentences]
        print(json.dumps(first_calls(Path(args.first_calls), sources, args.device, args.profile_first)))
        return
    work = Path(args.work)
    if args.transformer:
        sources = read_lines(Path(args.data) / "test_2016_flickr.de.gz")[: args.sentences]
        work.mkdir(parents=True, exist_ok=True)
        (work / "transformer.json").write_text(json.dumps(transformer_decoding(args, work, sources), indent=1))
        return
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none"
    results = {"gpu": gpu, "torch": torch.__version__, "steps": args.steps}
    runs = [("graphs", True, "fp32", None), ("eager", False, "fp32", None)]
    runs += [("graphs-bf16", True, "bf16", None)] if args.bf16 else []
    runs += [(f"graphs-{args.batch_tokens}-tokens", True, "fp32", args.batch_tokens)] if args.batch_tokens else []
    if args.profile:
        profiler = profiled(args.profile)
        train(args, work / "profile", True, "fp32")
        profiler.stop()
        events = profiler.key_averages()
        print(events.table(sort_by="self_cpu_time_total", row_limit=30))
        gpu = sum(e.self_device_time_total for e in events) / 1e3
        wall = sum(e.cpu_time_total for e in events if e.key.startswith("ProfilerStep")) / 1e3
        print(f"{args.profile} steps: {wall:.0f} ms of wall time, kernels busy {gpu:.0f} ms ({100 * gpu / wall:.0f} %)")
        return
    for name, graphs, precision, tokens in runs:
        results[f"train_{name}"] = train(args, work / name, graphs, precision, tokens)
        print(f"training, {name}: {results[f'train_{name}']}", flush=True)
    sources = read_lines(Path(args.data) / "test_2016_flickr.de.gz")
    for beam in (1, 5):
        for plain in (False, True):
            key = f"decode_beam{beam}_{'reference' if plain else 'fast'}"
            results[key] = decode(work / "graphs", sources[: args.sentences], beam, plain, args.device)
            print(f"{key}: {results[key]:.0f} sentences/s", flush=True)
    train_ratio = results["train_graphs"]["sentences_per_s"] / results["train_eager"]["sentences_per_s"]
    print(f"\ntraining graphs / eager: {train_ratio:.2f}x")
    for beam in (1, 5):
        print(
            f"decoding beam {beam} fast / reference: "
            f"{results[f'decode_beam{beam}_fast'] / results[f'decode_beam{beam}_reference']:.2f}x"
        )
    (work / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
