"""Fine-tuning on a little in-domain data: how much does it gain in the new domain, and what does it
cost in the old one?

    flock /tmp/attnmt-bench.lock python benchmarks/fine_tuning.py runs/experiments/transformer-en-fr

Luong & Manning (2015) trained further a general English -> German model on 200,000 pairs of TED talks
and gained several BLEU on talks; Freitag & Al-Onaizan (2016) found that continued training on the
new domain gains much there but loses in the old one, and that an ensemble of the adapted and the
original model keeps most of both. Here the general model is the English -> French Transformer of
configs/experiments/transformer-en-fr.yaml (image captions, Multi30k); the new domain is the
Canadian Hansards (parliament debates, lowercased and tokenized) of the shared alignment test set:
its first --train pairs to fine-tune on, the next --dev to choose the checkpoint, the rest to test.
Lines: BLEU and chrF (beam 5) on the Hansards test pairs and on Multi30k test_2016, for the general model,
the same architecture trained on the Hansards pairs alone (from scratch, as many steps), the
fine-tuned model, and the ensemble of the general and the fine-tuned models.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def hansards_splits(path: Path, out: Path, train: int, dev: int) -> dict[str, Path]:
    """The pairs of ``path`` ("english ||| french" lines) cut into train, dev and test TSV files in ``out``."""
    pairs = [line.split(" ||| ") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    parts = {"train": pairs[:train], "dev": pairs[train : train + dev], "test": pairs[train + dev :]}
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in parts.items():
        (out / f"{name}.tsv").write_text("".join(f"{en.strip()}\t{fr.strip()}\n" for en, fr in rows), encoding="utf-8")
    return {name: out / f"{name}.tsv" for name in parts}


def config_for(base, files: dict[str, Path], folder: Path, args, init: bool):
    """The base model's config on the Hansards pairs: fine-tuning it (``init``), or from scratch."""
    from attnmt.core.config import config_from_dict

    raw = base.config.model_dump(mode="json")
    raw["experiment_dir"] = str(folder.resolve())  # (every path absolute)
    raw["data"] = {
        "train": {"tsv": str(files["train"].resolve())},
        "dev": {"tsv": str(files["dev"].resolve())},
        "subwords": raw["data"]["subwords"],
        "max_length": 100,
        "batch_size": args.batch_size,
    }
    raw["model"]["dropout"] = args.dropout
    raw["training"] = {
        "seed": 42,
        "threads": 2,
        "learning_rate": args.learning_rate,
        "schedule": "plateau",
        "max_steps": args.steps,
        "validate_every": args.validate_every,
        "log_every": 20,
        "label_smoothing": 0.1,
        "early_stopping_patience": None,
        "adam_betas": [0.9, 0.98],
        **({"init_from": str(base.folder.resolve())} if init else {}),
    }
    return config_from_dict(raw, folder.parent)


def scores(model, pairs: tuple[list[str], list[str]]) -> tuple[float, float]:
    """BLEU and chrF of the model's translations (beam 5); force: the Hansards are tokenized text."""
    import sacrebleu

    outputs = [t.text for t in model.translate(pairs[0], beam=5, batch_size=32)]
    return (
        sacrebleu.corpus_bleu(outputs, [pairs[1]], force=True).score,
        sacrebleu.corpus_chrf(outputs, [pairs[1]]).score,
    )


def main():
    import attnmt
    from attnmt.data.corpus import read_lines
    from attnmt.training import train

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the general English -> French model folder")
    parser.add_argument("--hansards", type=Path, default=SHARED / "alignment" / "hansards-enfr.src-tgt")
    parser.add_argument(
        "--test",
        nargs=2,
        type=Path,
        default=[SHARED / "multi30k" / "test_2016_flickr.en.gz", SHARED / "multi30k" / "test_2016_flickr.fr.gz"],
    )
    parser.add_argument("--out", type=Path, default=Path("runs/experiments/fine-tuning"))
    parser.add_argument("--train", type=int, default=300)
    parser.add_argument("--dev", type=int, default=47)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--validate-every", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--dropout", type=float, default=0.3)
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/fine_tuning.py",
        trained_model(
            args.model,
            "the general English -> French model",
            "train it first: attnmt train configs/experiments/transformer-en-fr.yaml",
        ),
        path(args.hansards, "the Hansards pairs (--hansards)"),
        [path(file, "Multi30k test_2016 (--test)") for file in args.test],
    )

    base = attnmt.load(args.model)
    files = hansards_splits(args.hansards, args.out / "hansards", args.train, args.dev)
    hansards = tuple(list(column) for column in zip(*(line.split("\t") for line in read_lines(files["test"]))))
    general = tuple(read_lines(path) for path in args.test)
    print(
        f"fine-tuning {args.model} on {args.train} Hansards pairs, {args.steps} steps, learning rate "
        f"{args.learning_rate}, dropout {args.dropout}; {len(hansards[0])} Hansards test pairs; "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    rows = [("general model", base)]
    for name, init in (("Hansards pairs alone, from scratch", False), ("fine-tuned", True)):
        folder = args.out / ("fine-tuned" if init else "scratch")
        if not (folder / "last.safetensors").exists():
            started = time.perf_counter()
            train(config_for(base, files, folder, args, init), log=lambda message: None, progress=False)
            print(f"  {name}: trained in {time.perf_counter() - started:.0f} s")
        rows.append((name, attnmt.load(folder)))
    ensemble = attnmt.load(args.out / "fine-tuned")
    ensemble.ensemble([attnmt.load(args.model)])
    rows.append(("ensemble of general and fine-tuned", ensemble))
    print(f"{'model':<38}{'Hansards BLEU':>14}{'chrF':>7}{'Multi30k test_2016 BLEU':>25}{'chrF':>7}")
    for name, model in rows:
        print(
            f"{name:<38}"
            + "".join(
                f"{value:>{width}.2f}"
                for value, width in zip((*scores(model, hansards), *scores(model, general)), (14, 7, 25, 7))
            )
        )


if __name__ == "__main__":
    main()
