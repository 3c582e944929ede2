"""Fine-tuning a speech model trained on synthesized speech on a little real speech: does starting from
it beat starting from nothing, for the same number of steps?

    attnmt quickstart --speech --dir runs/experiments/quickstart-speech
    flock /tmp/attnmt-bench.lock python benchmarks/fine_tuning_speech.py runs/experiments/quickstart-speech/model

The general model is the speech quick start's (espeak-ng voices reading 1-5 words, location-aware
attention, 800 steps). The new data: real recordings of spoken digit strings (FSDD,
attnmt.speech.digits: 1-3 digits by four speakers, --strings of them to train on), tested on the
fifth speaker's strings (test-speaker). For each budget of --steps and each of --seeds: the quick start's model
fine-tuned (training.init_from) and the same model trained from nothing on the same strings, with
the same settings; CER and WER (greedy) of each, and of the quick start's model as it is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def config_for(general, data: Path, folder: Path, steps: int, init: bool, seed: int):
    """The quick start's config on the digit strings: fine-tuning it (``init``), or from nothing."""
    from attnmt.core.config import config_from_dict

    raw = general.config.model_dump(mode="json")
    raw["experiment_dir"] = str(folder.resolve())
    train, dev = (str((data / f"{name}.tsv").resolve()) for name in ("train", "dev"))
    raw["data"] = {
        "train": {"tsv": train},
        "dev": {"tsv": dev},
        "subwords": raw["data"]["subwords"],
        "batch_size": 32,
        "max_length": 80,
    }
    raw["training"] = {
        **raw["training"],
        "seed": seed,
        "max_steps": steps,
        "validate_every": max(steps // 4, 1),
        "early_stopping_metric": "cer",
        "early_stopping_patience": None,
        "log_every": 25,
        **({"init_from": str(general.folder.resolve())} if init else {}),
    }
    return config_from_dict(raw, folder.parent)


def error_rates(model, tsv: Path) -> tuple[float, float]:
    from attnmt.core.config import CorpusFiles
    from attnmt.speech.error_rates import speech_test_set_reports

    [report] = speech_test_set_reports(model, {"test": CorpusFiles(tsv=tsv)}, beam=1, log=lambda message: None).values()
    return report["cer"], report["wer"]  # (in %)


def main():
    import attnmt
    from attnmt.training import train

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the speech quick start's model folder")
    parser.add_argument("--fsdd", type=Path, default=SHARED / "speech" / "fsdd")
    parser.add_argument("--out", type=Path, default=Path("runs/experiments/fine-tuning-speech"))
    parser.add_argument("--strings", type=int, default=300, help="digit strings to train on")
    parser.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], default=[50, 100, 300, 1000])
    parser.add_argument(
        "--seeds",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[42],
        help="training.seed of each run (the quick start's: 42)",
    )
    args = parser.parse_args()
    from requirements import check, path, trained_model

    data = args.out / f"digits-{args.strings}"
    check(
        "benchmarks/fine_tuning_speech.py",
        trained_model(
            args.model, "the speech quick start's model", "train it first: attnmt quickstart --speech --dir DIR"
        ),
        path(args.fsdd, "the spoken digits (FSDD) the digit strings are made of (--fsdd)")
        if not (data / "train.tsv").exists()
        else None,
    )
    if not (data / "train.tsv").exists():
        subprocess.run(
            [sys.executable, "-m", "attnmt.speech.digits", str(args.fsdd), str(data), "--train", str(args.strings)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    general = attnmt.load(args.model)
    test = data / "test-speaker.tsv"
    print(
        f"fine-tuning {args.model} on {args.strings} FSDD digit strings (4 speakers); test: the fifth "
        f"speaker's; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(f"{'model':<44}{'steps':>6}{'CER %':>8}{'WER %':>8}")
    cer, wer = error_rates(general, test)
    print(f"{'the quick start model (synthesized speech)':<44}{'':>6}{cer:8.2f}{wer:8.2f}")
    for steps in args.steps:
        for name, init in (("from nothing", False), ("fine-tuned from the quick start model", True)):
            for seed in args.seeds:
                folder = args.out / f"{'fine-tuned' if init else 'scratch'}-{args.strings}-{steps}-s{seed}"
                if not (folder / "last.safetensors").exists():
                    train(
                        config_for(general, data, folder, steps, init, seed), log=lambda message: None, progress=False
                    )
                cer, wer = error_rates(attnmt.load(folder), test)
                print(f"{name + f' (seed {seed})':<44}{steps:>6}{cer:8.2f}{wer:8.2f}")


if __name__ == "__main__":
    main()
