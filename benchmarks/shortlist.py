"""Speed and BLEU of vocabulary shortlists (attnmt.translation.shortlist): attnmt float32 with the full output
layer against the same model with its shortlist.json (built first by `attnmt shortlist MODEL_DIR`).

    attnmt shortlist runs/bench-rnn-bahdanau/model            # the lexical table, once
    flock /tmp/attnmt-bench.lock python benchmarks/shortlist.py --model runs/bench-rnn-bahdanau/model
    python benchmarks/shortlist.py --model DIR --src test.en --ref test.fr --limit 1000 --beams 5

Translates the first --limit sentences (default: Multi30k test_2016_flickr German -> English) with
batch 64 and --threads threads, the two engines taking turns, best of --repeats timings
(benchmarks/int8.py's `measure`); prints sentences/s (translation only, the model loaded before),
sacreBLEU (13a, cased), the mean size of the restricted vocabulary per batch and how many
translations the shortlist changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8 import MULTI30K, measure, print_table  # noqa: E402


def engine(model_dir: Path, shortlist: bool):
    """translate(texts, beam) -> texts, with attnmt (float32), with or without the folder's shortlist."""

    translator = attnmt.load(model_dir)

    def translate(texts: list[str], beam: int) -> list[str]:
        return [t.text for t in translator.translate(texts, beam=beam, batch_size=64, shortlist=shortlist)]

    return translate, translator


def mean_vocabulary(translator, sources: list[str]) -> tuple[float, int]:
    """The mean size of V' over the batches of 64 sentences of ``sources``, and the full size."""
    from attnmt.data.batching import make_batch

    table = translator.shortlist_table(True)
    ids = translator.src_subwords.encode(sources)
    sizes = [table.vocabulary(make_batch(ids[i : i + 64]).src).numel() for i in range(0, len(ids), 64)]
    return sum(sizes) / len(sizes), len(translator.tgt_subwords)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a translation model folder holding shortlist.json")
    parser.add_argument("--limit", type=int, default=1000, help="first N test sentences (default 1000)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timings per engine and search; the best is kept")
    parser.add_argument("--beams", type=int, nargs="+", default=[5])
    parser.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.de.gz"))
    parser.add_argument("--ref", default=str(MULTI30K / "test_2016_flickr.en.gz"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    from attnmt.data.corpus import read_lines
    from requirements import check, path, trained_model

    model = Path(args.model)
    check(
        "benchmarks/shortlist.py",
        trained_model(model, "the translation model (--model)"),
        path(
            model / "shortlist.json",
            "its shortlist",
            f"build it first: attnmt shortlist {model} (with eflomal: pip install 'attnmt[experiments]')",
        )
        if model.is_dir()
        else None,
        [path(file, option) for file, option in ((args.src, "--src"), (args.ref, "--ref"))],
    )
    torch.set_num_threads(args.threads)
    sources, references = read_lines(args.src)[: args.limit], read_lines(args.ref)[: args.limit]
    (full, _), (short, translator) = engine(model, False), engine(model, True)
    results = measure(
        {"attnmt fp32": full, "attnmt fp32 shortlist": short}, sources, references, args.beams, args.repeats
    )
    size, vocabulary = mean_vocabulary(translator, sources)
    changed = {beam: sum(a != b for a, b in zip(full(sources, beam), short(sources, beam))) for beam in args.beams}
    header = (
        f"{len(sources)} sentences of {Path(args.src).name}, batch 64, {args.threads} threads, best of "
        f"{args.repeats}; {time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}; restricted vocabulary "
        f"{size:.0f} of {vocabulary} pieces per batch on average; translations changed: "
        + ", ".join(f"beam {b}: {n}" for b, n in changed.items())
    )
    print_table(f"{model}: {header}", results, "attnmt fp32")
    if args.json:
        report = {
            "command": " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "results": results,
            "mean_vocabulary": size,
            "vocabulary": vocabulary,
            "changed": changed,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
