"""Speed and BLEU of cheaper inference: attnmt fp32 against attnmt int8 (attnmt.load(..., quantize="int8"))
and the bf16 output layer (quantize="bf16"), and for a Transformer also CTranslate2 (float32 and int8)
on the same model, exported with attnmt export.

    python benchmarks/int8.py                                   # runs/bench-rnn-bahdanau/model, 500 sentences
    python benchmarks/int8.py --model DIR --limit 1000 --repeats 3
    python benchmarks/int8.py --model runs/bench-rnn-bahdanau/model \\
        --transformer runs/bench-transformer-small/model        # adds the Transformer rows and CTranslate2

Translates the first --limit sentences of Multi30k test_2016_flickr (German -> English) greedy and with
beam 5, batch 64, --threads threads, and prints sentences/s (translation only, the model loaded
before; text in, text out) and sacreBLEU (13a, cased) for each engine, with the ratios to attnmt
fp32. Each timing is repeated --repeats times, the engines taking turns, and the best is kept:
on a shared machine the slowest runs measure the other jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
DEFAULT_MODEL = REPO / "runs" / "bench-rnn-bahdanau" / "model"


def attnmt_engine(model_dir: Path, quantize: str | None, quantize_rnn: bool = False):
    """translate(texts, beam) -> texts, with attnmt."""

    translator = attnmt.load(model_dir, quantize=quantize)
    if quantize_rnn:  # the encoder's nn.GRU / nn.LSTM too, to see whether it pays
        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao's announced move to torchao
            translator.model = quantize_dynamic(translator.model, {torch.nn.GRU, torch.nn.LSTM}, dtype=torch.qint8)

    def translate(texts: list[str], beam: int) -> list[str]:
        return [t.text for t in translator.translate(texts, beam=beam, batch_size=64)]

    return translate


def ct2_engine(model_dir: Path, ct2_dir: Path, compute_type: str, threads: int):
    """translate(texts, beam) -> texts, with CTranslate2 on the exported model, attnmt's subwords
    and length limit (output <= ratio * source length + offset, for the longest sentence given).
    Its length penalty divides by length ** alpha, attnmt's by ((5 + length) / 6) ** alpha: beam
    results, and so BLEU, can differ a little for that reason alone."""
    import ctranslate2

    ours = attnmt.load(model_dir)
    src, tgt, decoding = ours.src_subwords, ours.tgt_subwords, ours.config.decoding
    translator = ctranslate2.Translator(
        str(ct2_dir), device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
    )

    def translate(texts: list[str], beam: int) -> list[str]:
        pieces = [src.pieces(ids) for ids in src.encode(texts)]
        limit = int(decoding.max_length_ratio * (max(map(len, pieces)) + 1) + decoding.max_length_offset)
        results = translator.translate_batch(
            pieces, beam_size=beam, max_batch_size=64, max_decoding_length=limit, length_penalty=decoding.length_penalty
        )
        return [tgt.sp.decode(r.hypotheses[0]) for r in results]

    return translate


def measure(engines: dict, sources: list[str], references: list[str], beams: list[int], repeats: int) -> dict:
    from attnmt.translation.evaluation import corpus_scores

    results = {}
    for beam in beams:
        best, outputs = {name: 0.0 for name in engines}, {}
        for _ in range(repeats):
            for name, translate in engines.items():  # taking turns: load changes hit every engine alike
                translate(sources[:16], beam)  # warm-up: first calls allocate and pick kernels
                started = time.perf_counter()
                outputs[name] = translate(sources, beam)
                best[name] = max(best[name], len(sources) / (time.perf_counter() - started))
        for name in engines:
            bleu = corpus_scores(outputs[name], references)["bleu"].score
            results[f"{name}, {'greedy' if beam == 1 else f'beam {beam}'}"] = {
                "sentences_per_s": best[name],
                "bleu": bleu,
            }
            print(f"  {name}, beam {beam}: {best[name]:.1f} sent/s, BLEU {bleu:.2f}", file=sys.stderr, flush=True)
    return results


def print_table(title: str, results: dict, baseline: str):
    print(f"\n{title}\n\n| engine, search | sentences/s | BLEU | speed / attnmt fp32 | BLEU - attnmt fp32 |")
    print("|---|---|---|---|---|")
    for key, r in results.items():
        base = results[f"{baseline}, {key.split(', ', 1)[1]}"]
        print(
            f"| {key} | {r['sentences_per_s']:.1f} | {r['bleu']:.2f} | "
            f"{r['sentences_per_s'] / base['sentences_per_s']:.2f} | {r['bleu'] - base['bleu']:+.2f} |"
        )


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default=str(DEFAULT_MODEL),
        help="an RNN (or any) model folder "
        "(default: runs/bench-rnn-bahdanau/model, made by benchmarks/rnn_bahdanau.py); "
        "'none' for the Transformer only",
    )
    parser.add_argument("--transformer", help="a Transformer model folder: adds its rows and CTranslate2's")
    parser.add_argument("--limit", type=int, default=500, help="first N test sentences (default 500; 1000 = all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timings per engine and search; the best is kept")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument(
        "--quantize-rnn", action="store_true", help="add attnmt int8 with the encoder's GRU/LSTM quantized as well"
    )
    parser.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.de.gz"))
    parser.add_argument("--ref", default=str(MULTI30K / "test_2016_flickr.en.gz"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    from attnmt.data.corpus import read_lines

    model = None if args.model == "none" else Path(args.model)
    if model is None and not args.transformer:
        sys.exit("nothing to measure: give --model and/or --transformer")
    from requirements import check, extra, path, trained_model

    check(
        "benchmarks/int8.py",
        trained_model(
            model,
            "the model to decode (--model)",
            "the default is the Multi30k rnn-bahdanau model that `python benchmarks/rnn_bahdanau.py` trains "
            "(20 minutes); give --model DIR for another (or --model none --transformer DIR)",
        )
        if model is not None
        else None,
        trained_model(args.transformer, "the Transformer (--transformer)") if args.transformer else None,
        extra("ct2", "ctranslate2", "decodes the Transformer exported to CTranslate2 (--transformer)")
        if args.transformer
        else None,
        [path(file, option) for file, option in ((args.src, "--src"), (args.ref, "--ref"))],
    )
    torch.set_num_threads(args.threads)
    sources, references = read_lines(args.src)[: args.limit], read_lines(args.ref)[: args.limit]
    header = (
        f"{len(sources)} sentences of {Path(args.src).name}, batch 64, {args.threads} threads, "
        f"best of {args.repeats}; {time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}"
    )
    report = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "sentences": len(sources),
        "threads": args.threads,
    }
    if model is not None:
        engines = {
            "attnmt fp32": attnmt_engine(model, None),
            "attnmt int8": attnmt_engine(model, "int8"),
            "attnmt bf16 output layer": attnmt_engine(model, "bf16"),
        }
        if args.quantize_rnn:
            engines["attnmt int8 + RNN int8"] = attnmt_engine(model, "int8", quantize_rnn=True)
        report[str(model)] = results = measure(engines, sources, references, args.beams, args.repeats)
        print_table(f"{model}: {header}", results, "attnmt fp32")
    if args.transformer:
        import ctranslate2

        from attnmt.translation.export import export_ct2

        transformer = Path(args.transformer)
        with tempfile.TemporaryDirectory() as tmp:
            ct2_dir = export_ct2(transformer, Path(tmp) / "ct2")  # float32 weights; int8 when loaded
            engines = {
                "attnmt fp32": attnmt_engine(transformer, None),
                "attnmt int8": attnmt_engine(transformer, "int8"),
                "attnmt bf16 output layer": attnmt_engine(transformer, "bf16"),
                "CTranslate2 float32": ct2_engine(transformer, ct2_dir, "float32", args.threads),
                "CTranslate2 int8": ct2_engine(transformer, ct2_dir, "int8", args.threads),
            }
            report[str(transformer)] = results = measure(engines, sources, references, args.beams, args.repeats)
        print_table(f"{transformer}: {header}, CTranslate2 {ctranslate2.__version__}", results, "attnmt fp32")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
