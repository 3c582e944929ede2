"""Benchmark a reference configuration: Multi30k German -> English under a wall-clock training budget.

    python benchmarks/run.py --config configs/rnn-bahdanau.yaml         # 20 minutes, the reference run
    python benchmarks/run.py --config configs/transformer-small.yaml
    python benchmarks/run.py --config configs/transformer-small.yaml --minutes 1   # a quick check
    python benchmarks/run.py --config configs/transformer-small.yaml \\
        --beside runs/bench-rnn-bahdanau/results.json                  # a column for an earlier run
    python benchmarks/run.py --device cuda --data DIR --batch-tokens 5000   # on a GPU, Multi30k in DIR
    python benchmarks/run.py --out runs/bench-rnn-bahdanau --decode-only     # decode that model again

Trains the configuration (its data, model and training sections; experiment_dir, time budget,
threads and precision from here) in a child process, so its peak memory is measured on its own,
then translates test_2016_flickr with greedy search and beam 5 and prints: training speed, steps,
the validation BLEU curve, test BLEU and chrF (sacreBLEU, 13a, cased), decoding speed and peak
memory, beside the peers' figures measured on this machine for the same configuration, if any.
Results go to OUT/results.json (OUT defaults to runs/bench-NAME, NAME the config's file name).

--device cuda trains and decodes on the GPU (training.device: cuda; precision fp32 unless --precision
says otherwise: bf16 was slower at batch 64, docs/performance.md); the cheaper CPU inference
modes (--bf16, --int8) are then not decoded. --data DIR
reads the Multi30k files (train, val, test_2016_flickr .de/.en .gz) from DIR instead of the
config's paths and ../shared/data/multi30k. Without an installed attnmt, PYTHONPATH=src works too
(the training runs as `python -m attnmt.cli` with this environment).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from safetensors import safe_open

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"

# Measured on this machine with the configurations in ../shared/peers (20 minutes, 2 threads):
# RNN encoder-decoders with Bahdanau attention, so they stand beside rnn-bahdanau only.
PEERS = {
    "rnn-bahdanau": {
        "OpenNMT-py 3.5.1": {
            "sentences_per_s": 115,
            "tokens_per_s": 1750,
            "steps": 2200,
            "bleu_greedy": 34.2,
            "bleu_beam5": 35.9,
            "chrf_beam5": 54.5,
            "decode_greedy": 96,
            "decode_beam5": 56,
            "peak_rss_gb": 3.35,
        },
        "JoeyNMT 2.3.0": {
            "sentences_per_s": 59,
            "tokens_per_s": 890,
            "steps": 1050,
            "bleu_greedy": 6.0,
            "bleu_beam5": 6.0,
            "chrf_beam5": 24.1,
            "decode_greedy": 75,
            "decode_beam5": 35,
            "peak_rss_gb": 1.70,
        },
    },
}

# Beam 5 with attnmt's opt-in cheaper inference (--bf16: the output layer's product in bf16, as
# in bf16 training; --int8: dynamic int8 linear layers; --shortlist: float32, the output layer
# restricted to the pieces the batch's source makes likely, from MODEL/shortlist.json that
# `attnmt shortlist` builds first), beside the float32 figures above. The peers decode in float32
# only on CPUs: their ratios use the peer's float32 figure (PEER_KEY).
CHEAPER = ("bf16", "int8", "shortlist")
CHEAPER_ROWS = [
    row
    for q in CHEAPER
    for row in (
        (f"test BLEU beam 5, --{q}", f"bleu_beam5_{q}", "{:.1f}"),
        (f"decode sent/s beam 5 (wall), --{q}", f"decode_beam5_{q}", "{:.0f}"),
    )
]
PEER_KEY = {f"{figure}_beam5_{q}": f"{figure}_beam5" for q in CHEAPER for figure in ("bleu", "decode")}

ROWS = [
    ("training sentences/s", "sentences_per_s", "{:.0f}"),
    ("training target tokens/s", "tokens_per_s", "{:.0f}"),
    ("steps", "steps", "{:.0f}"),
    ("test BLEU greedy", "bleu_greedy", "{:.1f}"),
    ("test BLEU beam 5", "bleu_beam5", "{:.1f}"),
    ("test chrF beam 5", "chrf_beam5", "{:.1f}"),
    ("decode sent/s greedy (wall)", "decode_greedy", "{:.0f}"),
    ("decode sent/s beam 5 (wall)", "decode_beam5", "{:.0f}"),
    *CHEAPER_ROWS,
    ("training peak RSS GB", "peak_rss_gb", "{:.2f}"),
]


def write_config(args, out: Path) -> Path:
    """The benchmark's copy of the configuration, its paths made absolute."""
    from attnmt.core.config import config_to_yaml, load_config

    config = load_config(args.config)
    config.experiment_dir = out / "model"
    config.training.max_minutes, config.training.threads = args.minutes, args.threads
    config.training.precision = args.precision
    config.training.device = args.device
    if args.batch_tokens:
        config.data.batch_tokens = args.batch_tokens
    if args.data:  # the benchmark's copy of Multi30k, wherever it lies
        data = Path(args.data).resolve()
        config.data.train = config.data.train.model_copy(
            update={"src": data / "train.de.gz", "tgt": data / "train.en.gz"}
        )
        if config.data.dev is not None:
            config.data.dev = config.data.dev.model_copy(update={"src": data / "val.de.gz", "tgt": data / "val.en.gz"})
    if args.validate_every:
        config.training.validate_every = args.validate_every
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(config_to_yaml(config))
    return path


def train(config_path: Path) -> float:
    """Runs `attnmt train` in a child process; returns its peak resident memory in GB."""
    subprocess.run([sys.executable, "-m", "attnmt.cli", "train", str(config_path)], check=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 / 1024  # KiB -> GiB


def decode_test(
    model_dir: Path,
    beam: int,
    threads: int,
    quantize: str | None = None,
    data: Path = MULTI30K,
    device: str = "cpu",
    shortlist: bool = False,
) -> dict:
    """Loads the model and translates test_2016_flickr, in a process set up as `attnmt translate`'s:
    attnmt imported before torch, so that OpenMP's threads wait as attnmt sets them to
    (attnmt.core.threads.configure_waiting, read once when torch loads OpenMP). Imported the other
    way round, the threads spun as OpenMP's default has them, and this figure and the whole
    command's (benchmarks/peers.py) measured two different programs."""
    import attnmt  # (first: see above)
    import torch
    from attnmt.data.corpus import read_lines
    from attnmt.translation.evaluation import corpus_scores

    torch.set_num_threads(threads)
    sources = read_lines(data / "test_2016_flickr.de.gz")
    references = read_lines(data / "test_2016_flickr.en.gz")
    started = time.perf_counter()
    model = attnmt.load(model_dir, quantize=quantize, device=device)
    loaded, loaded_at = time.perf_counter(), time.time()
    hypotheses = [
        t.text
        for t in model.translate(
            sources,
            beam=beam,
            batch_size=64,  # texts: on the host
            shortlist=shortlist,
        )
    ]
    done, done_at = time.perf_counter(), time.time()
    scores = corpus_scores(hypotheses, references)
    suffix = f".{quantize}" if quantize else ".shortlist" if shortlist else ""
    (model_dir / f"test_2016_flickr.beam{beam}{suffix}.en").write_text("\n".join(hypotheses) + "\n")
    return {
        "bleu": scores["bleu"].score,
        "chrf": scores["chrf"].score,
        "signature": scores["bleu"].signature,
        "sentences_per_s": len(sources) / (done - loaded),
        "sentences_per_s_wall": len(sources) / (done - started),
        "decoding_window": [loaded_at, done_at],
    }  # wall clock: benchmarks/peers.py's GPU samples


def decode_cheaper(model_dir: Path, kind: str, threads: int, data: Path) -> dict:
    """Beam 5 with one of attnmt's cheaper inference modes (CHEAPER). The shortlist's table is built
    first, once, by `attnmt shortlist` (eflomal on the training corpus: not part of the decoding time)."""
    if kind != "shortlist":
        return decode_test(model_dir, 5, threads, quantize=kind, data=data)
    if not (model_dir / "shortlist.json").is_file():
        subprocess.run([sys.executable, "-m", "attnmt.cli", "shortlist", str(model_dir)], check=True)
    return decode_test(model_dir, 5, threads, data=data, shortlist=True)


def in_fresh_process(function, *args, **kwargs):
    """``function(*args, **kwargs)`` in a new Python process. Each decoding is timed in its own, as each
    of the peers' translate commands runs in its own: a second decoding in the same process would find
    the device warm (on a GPU: cuBLAS, cuDNN and the kernels loaded at their first use, about 0.3 s on
    an H100), which the peer's decoding pays for."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args, **kwargs).result()


def print_table(name: str, ours: dict, others: dict[str, dict]):
    names = [f"attnmt {name}"] + list(others)
    print("\n| figure | " + " | ".join(names) + "".join(f" | {name} / {o}" for o in others) + " |")
    print("|---" * (1 + len(names) + len(others)) + "|")
    for label, key, fmt in ROWS:
        # A peer's float32 figure stands beside attnmt's --bf16/--int8 ones; an earlier attnmt run's own.
        theirs = [others[o].get(key if o.startswith("attnmt") else PEER_KEY.get(key, key)) for o in others]
        values = [ours.get(key)] + theirs
        ratios = [f"{ours[key] / t:.2f}" if ours.get(key) and t else "—" for t in theirs]
        print(
            f"| {label} | "
            + " | ".join("—" if v is None else fmt.format(v) for v in values)
            + "".join(f" | {r}" for r in ratios)
            + " |"
        )
    if any(not o.startswith("attnmt") for o in others):
        print("(rows --bf16, --int8, --shortlist: the peers' columns hold their float32 figures)")


def check_requirements(args, data: Path, model_dir: Path):
    """What the run needs, checked before it trains or decodes (benchmarks/requirements.py): one
    message naming what to install, and exit status 2."""
    from requirements import check, cuda, extra, files, multi30k, path

    names = ["test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]
    if args.data and not args.decode_only:  # training reads --data's train and val instead of the config's
        names += [f"{split}.{lang}.gz" for split in ("train", "val") for lang in ("de", "en")]
    needs = [multi30k(data, names), path(args.config, "the configuration (--config)", None)]
    if not (args.data or args.decode_only) and Path(args.config).is_file():  # the config's own corpora
        from attnmt.core.config import load_config

        corpora = load_config(args.config).data
        needs += [
            files(file.parent, [file.name], f"a corpus of {args.config}")
            for corpus in (corpora.train, corpora.dev)
            if corpus is not None
            for file in (corpus.src, corpus.tgt, corpus.tsv)
            if file is not None
        ]
    if args.device == "cuda":
        needs.append(cuda("--device cuda: training and decoding on the GPU"))
    elif not (model_dir / "shortlist.json").is_file():  # beam 5 with --shortlist: its table made first
        needs.append(extra("experiments", "eflomal", "`attnmt shortlist` aligns the training corpus with it"))
    check("benchmarks/run.py", *needs)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--config",
        default=str(REPO / "configs" / "rnn-bahdanau.yaml"),
        help="the reference configuration (default: configs/rnn-bahdanau.yaml)",
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget (wall clock of training steps)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=None,
        help="training precision (default: bf16 on CPUs with bf16 units, AVX512-BF16/AMX; else fp32, also on GPUs)",
    )
    parser.add_argument("--validate-every", type=int, default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train and decode")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=None,
        help="data.batch_tokens: batches of about this many (padded) tokens instead of sentences",
    )
    parser.add_argument(
        "--data",
        help="folder of the Multi30k .gz files (default ../shared/data/multi30k, and the config's training paths)",
    )
    parser.add_argument("--out", help="output folder (default: runs/bench-NAME)")
    parser.add_argument(
        "--beside",
        action="append",
        default=[],
        metavar="RESULTS_JSON",
        help="results.json of an earlier run to show as a column (repeatable)",
    )
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help="decode OUT/model (trained by an earlier run) again: new decoding figures in "
        "OUT/results.json, the training figures kept",
    )
    args = parser.parse_args(argv)
    from attnmt.core.speed import cpu_has_bf16

    if args.device == "cuda":  # (no CUDA call here: the training process is the first to use the GPU)
        args.precision = args.precision or "fp32"
        cheaper_kinds = []  # --int8 and --bf16 are CPU inference modes
    else:
        args.precision = args.precision or ("bf16" if cpu_has_bf16() else "fp32")
        cheaper_kinds = [q for q in CHEAPER if q != "bf16" or cpu_has_bf16()]  # emulated bf16: only slower
    name = Path(args.config).stem
    out = Path(args.out or REPO / "runs" / f"bench-{name}").resolve()
    data = Path(args.data).resolve() if args.data else MULTI30K
    model_dir = out / "model"
    check_requirements(args, data, model_dir)
    if args.decode_only:
        if not (out / "results.json").is_file():
            sys.exit(f"--decode-only: no {out}/results.json (an earlier run's): train first")
        earlier = json.loads((out / "results.json").read_text())
        peak_gb, validation = earlier["attnmt"]["peak_rss_gb"], earlier["validation"]
    else:
        if model_dir.exists():
            sys.exit(f"{out}/model exists: remove it or pass --out (or --decode-only)")
        peak_gb = train(write_config(args, out))
        records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
        validation = [r for r in records if r["type"] == "valid"]
    with safe_open(str(model_dir / "last.safetensors"), "pt") as f:
        last = json.loads(f.metadata()["info"])["trainer"]
    greedy, beam5 = (
        in_fresh_process(decode_test, model_dir, beam, args.threads, data=data, device=args.device) for beam in (1, 5)
    )
    cheaper = {q: in_fresh_process(decode_cheaper, model_dir, q, args.threads, data) for q in cheaper_kinds}
    ours = {
        "sentences_per_s": last["sentences"] / last["seconds"],
        "tokens_per_s": last["target_tokens"] / last["seconds"],
        "steps": last["step"],
        "train_seconds": last["seconds"],
        "bleu_greedy": greedy["bleu"],
        "bleu_beam5": beam5["bleu"],
        "chrf_beam5": beam5["chrf"],
        "decode_greedy": greedy["sentences_per_s_wall"],
        "decode_beam5": beam5["sentences_per_s_wall"],
        "peak_rss_gb": peak_gb,
        **{f"bleu_beam5_{q}": r["bleu"] for q, r in cheaper.items()},
        **{f"decode_beam5_{q}": r["sentences_per_s_wall"] for q, r in cheaper.items()},
        # decoding alone, model loading left out (benchmarks/peers.py sets it beside OpenNMT-py's own
        # report of its decoding seconds)
        "decode_greedy_only": greedy["sentences_per_s"],
        "decode_beam5_only": beam5["sentences_per_s"],
        **{f"decode_beam5_{q}_only": r["sentences_per_s"] for q, r in cheaper.items()},
    }
    if args.decode_only:
        ours["decoded_again"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    others = dict(PEERS.get(name, {})) if args.device == "cpu" else {}  # PEERS: CPU figures
    for path in args.beside:
        earlier = json.loads(Path(path).read_text())
        others[f"attnmt {earlier.get('name', Path(path).parent.name)}"] = earlier["attnmt"]

    print(
        f"\n{name}, Multi30k de-en, {args.minutes:g} min of training, {args.threads} threads, "
        f"{args.precision}, {args.device}; {time.strftime('%Y-%m-%d')}"
    )
    print("validation BLEU (greedy) by step: " + ", ".join(f"{r['step']}: {r['bleu']:.1f}" for r in validation))
    print(f"sacreBLEU signature: {beam5['signature']}")
    print(
        f"decoding without model loading: greedy {greedy['sentences_per_s']:.0f} sent/s, "
        f"beam 5 {beam5['sentences_per_s']:.0f} sent/s"
    )
    print_table(name, ours, others)
    results = {
        "name": name,
        "date": time.strftime("%Y-%m-%d"),
        "args": vars(args),
        "attnmt": ours,
        "peers": PEERS.get(name, {}) if args.device == "cpu" else {},
        "greedy": greedy,
        "beam5": beam5,
        "validation": validation,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
