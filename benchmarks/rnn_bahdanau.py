"""Benchmark "rnn-bahdanau": Multi30k German -> English under a wall-clock training budget.

    python benchmarks/rnn_bahdanau.py                 # 20 minutes, the reference run
    python benchmarks/rnn_bahdanau.py --minutes 3     # a quick check

Trains configs/rnn-bahdanau.yaml in a child process (so its peak memory is measured on its
own), then translates test_2016_flickr with greedy search and beam 5 and prints: training
speed, steps, the validation BLEU curve, test BLEU and chrF (sacreBLEU, 13a, cased),
decoding speed and peak memory, beside the peers' figures measured on this machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml
from safetensors import safe_open

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"

# Measured on this machine with the configurations in ../shared/peers (20 minutes, 2 threads).
PEERS = {
    "OpenNMT-py 3.5.1": {"sentences_per_s": 115, "tokens_per_s": 1750, "steps": 2200, "bleu_greedy": 34.2,
                         "bleu_beam5": 35.9, "chrf_beam5": 54.5, "decode_greedy": 96, "decode_beam5": 56,
                         "peak_rss_gb": 3.35},
    "JoeyNMT 2.3.0": {"sentences_per_s": 59, "tokens_per_s": 890, "steps": 1050, "bleu_greedy": 6.0,
                      "bleu_beam5": 6.0, "chrf_beam5": 24.1, "decode_greedy": 75, "decode_beam5": 35,
                      "peak_rss_gb": 1.70},
}


def write_config(args) -> Path:
    config = yaml.safe_load((REPO / "configs" / "rnn-bahdanau.yaml").read_text())
    out = Path(args.out).resolve()
    config["experiment_dir"] = str(out / "model")
    for split, files in (("train", "train"), ("dev", "val")):
        config["data"][split] = {"src": str(MULTI30K / f"{files}.de.gz"), "tgt": str(MULTI30K / f"{files}.en.gz")}
    config["training"].update(max_minutes=args.minutes, threads=args.threads, precision=args.precision)
    if args.validate_every:
        config["training"]["validate_every"] = args.validate_every
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def train(config_path: Path) -> float:
    """Runs `attnmt train` in a child process; returns its peak resident memory in GB."""
    subprocess.run([sys.executable, "-m", "attnmt.cli", "train", str(config_path)], check=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 / 1024  # KiB -> GiB


def decode_test(model_dir: Path, beam: int, threads: int) -> dict:
    import torch

    import attnmt
    from attnmt.data.corpus import read_lines
    from attnmt.evaluation import corpus_scores

    torch.set_num_threads(threads)
    sources = read_lines(MULTI30K / "test_2016_flickr.de.gz")
    references = read_lines(MULTI30K / "test_2016_flickr.en.gz")
    started = time.perf_counter()
    model = attnmt.load(model_dir)
    loaded = time.perf_counter()
    hypotheses = [t.text for t in model.translate(sources, beam=beam, batch_size=64)]
    done = time.perf_counter()
    scores = corpus_scores(hypotheses, references)
    (model_dir / f"test_2016_flickr.beam{beam}.en").write_text("\n".join(hypotheses) + "\n")
    return {"bleu": scores["bleu"].score, "chrf": scores["chrf"].score, "signature": scores["bleu"].signature,
            "sentences_per_s": len(sources) / (done - loaded),
            "sentences_per_s_wall": len(sources) / (done - started)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget (wall clock of training steps)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--validate-every", type=int, default=None)
    parser.add_argument("--out", default=str(REPO / "runs" / "bench-rnn-bahdanau"))
    args = parser.parse_args()
    if not MULTI30K.is_dir():
        sys.exit(f"benchmark data not found: {MULTI30K}")
    if (Path(args.out) / "model").exists():
        sys.exit(f"{args.out}/model exists: remove it or pass --out")

    config_path = write_config(args)
    peak_gb = train(config_path)
    model_dir = Path(args.out).resolve() / "model"
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in records if r["type"] == "valid"]
    with safe_open(str(model_dir / "last.safetensors"), "pt") as f:
        last = json.loads(f.metadata()["info"])["trainer"]
    greedy, beam5 = decode_test(model_dir, 1, args.threads), decode_test(model_dir, 5, args.threads)
    ours = {"sentences_per_s": last["sentences"] / last["seconds"],
            "tokens_per_s": last["target_tokens"] / last["seconds"], "steps": last["step"],
            "bleu_greedy": greedy["bleu"], "bleu_beam5": beam5["bleu"], "chrf_beam5": beam5["chrf"],
            "decode_greedy": greedy["sentences_per_s_wall"], "decode_beam5": beam5["sentences_per_s_wall"],
            "peak_rss_gb": peak_gb}

    print(f"\nrnn-bahdanau, Multi30k de-en, {args.minutes:g} min of training, {args.threads} threads, "
          f"{args.precision}; {time.strftime('%Y-%m-%d')}")
    print("validation BLEU (greedy) by step: " + ", ".join(
        f"{r['step']}: {r['bleu']:.1f}" for r in validation))
    print(f"sacreBLEU signature: {beam5['signature']}")
    print(f"decoding without model loading: greedy {greedy['sentences_per_s']:.0f} sent/s, "
          f"beam 5 {beam5['sentences_per_s']:.0f} sent/s")
    rows = [("training sentences/s", "sentences_per_s", "{:.0f}"),
            ("training target tokens/s", "tokens_per_s", "{:.0f}"),
            ("steps", "steps", "{:.0f}"), ("test BLEU greedy", "bleu_greedy", "{:.1f}"),
            ("test BLEU beam 5", "bleu_beam5", "{:.1f}"), ("test chrF beam 5", "chrf_beam5", "{:.1f}"),
            ("decode sent/s greedy (wall)", "decode_greedy", "{:.0f}"),
            ("decode sent/s beam 5 (wall)", "decode_beam5", "{:.0f}"),
            ("training peak RSS GB", "peak_rss_gb", "{:.2f}")]
    names = ["attnmt"] + list(PEERS)
    print("\n| figure | " + " | ".join(names) + " | attnmt / " + " | attnmt / ".join(PEERS) + " |")
    print("|---" * (1 + len(names) + len(PEERS)) + "|")
    for label, key, fmt in rows:
        values = [ours[key]] + [PEERS[p][key] for p in PEERS]
        ratios = [f"{ours[key] / PEERS[p][key]:.2f}" for p in PEERS]
        print(f"| {label} | " + " | ".join(fmt.format(v) for v in values) + " | " + " | ".join(ratios) + " |")
    results = {"date": time.strftime("%Y-%m-%d"), "args": vars(args), "attnmt": ours, "peers": PEERS,
               "greedy": greedy, "beam5": beam5, "validation": validation}
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
