"""The ``attnmt`` command line: prepare, train, translate, evaluate, quickstart."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnmt.errors import AttnmtError


def _read_input(path: str | None) -> list[str]:
    from attnmt.data.corpus import read_lines, split_lines

    if path is None or path == "-":
        return split_lines(sys.stdin.buffer.read(), "<stdin>")
    return read_lines(path)


def _open_output(path: str | None):
    if path is None or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None


def _write_text(path: str, text: str):
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None


def cmd_prepare(args):
    from attnmt.config import load_config
    from attnmt.data.prepare import prepare

    config = load_config(args.config)
    prepare(config, log=_log, force=args.force)
    _log(f"prepared {config.experiment_dir}")


def cmd_train(args):
    from attnmt.config import load_config
    from attnmt.training import train

    config = load_config(args.config)
    state = train(config, resume=args.resume, log=_log, progress=not args.no_progress)
    _log(f"finished at step {state.step} ({state.seconds / 60:.1f} min of training); "
         f"model in {config.experiment_dir}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_translate(args):
    from attnmt.api import load


    model = load(args.model_dir, args.checkpoint)
    beam = args.beam or model.config.decoding.beam
    if args.n_best > beam:
        raise AttnmtError(f"--n-best ({args.n_best}) cannot exceed the beam size ({beam}, from the model's "
                          "config); give a larger --beam")
    lines = _read_input(args.input)
    translations = model.translate(lines, beam=args.beam, n_best=args.n_best, batch_size=args.batch_size)
    out = _open_output(args.output)
    try:
        for i, t in enumerate(translations):
            if args.n_best == 1:
                out.write(t.text + "\n")
            else:  # Moses n-best format: sentence index ||| text ||| score
                for c in t.candidates:
                    out.write(f"{i} ||| {c.text} ||| {c.score:.4f}\n")
    finally:
        if out is not sys.stdout:
            out.close()


def cmd_evaluate(args):
    from attnmt.api import load
    from attnmt.data.corpus import read_lines
    from attnmt.evaluation import evaluation_report, format_report

    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise AttnmtError(f"line counts differ: {args.src} has {len(sources)} lines, "
                          f"{args.ref} has {len(references)}")
    model = load(args.model_dir, args.checkpoint)
    hypotheses = [t.text for t in model.translate(sources, beam=args.beam, batch_size=args.batch_size)]
    report = evaluation_report(sources, hypotheses, references)
    report["beam"] = args.beam or model.config.decoding.beam
    if args.hypotheses:
        _write_text(args.hypotheses, "".join(h + "\n" for h in hypotheses))
    if args.json:
        _write_text(args.json, json.dumps(report, indent=2) + "\n")
    print(format_report(report))


def cmd_quickstart(args):
    from attnmt.quickstart import run_quickstart

    run_quickstart(Path(args.dir), steps=args.steps, attention=args.attention, log=_log)


def _log(message: str):
    print(message, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnmt", description="Neural machine translation with attention.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare", help="train the subword model(s) of an experiment")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--force", action="store_true", help="retrain subwords even if present")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train", help="train a model (prepares subwords first if needed)")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--resume", action="store_true", help="continue from last.safetensors")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    def decoding_options(p):
        p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
        p.add_argument("--beam", type=_positive, default=None, help="beam size (1 = greedy; default: config)")
        p.add_argument("--batch-size", type=_positive, default=None, help="sentences per batch")
        p.add_argument("--checkpoint", choices=["best", "last"], default="best")

    p = sub.add_parser("translate", help="translate lines from a file or stdin")
    decoding_options(p)
    p.add_argument("-i", "--input", help="input file (plain or .gz); default stdin")
    p.add_argument("-o", "--output", help="output file; default stdout")
    p.add_argument("--n-best", type=_positive, default=1, help="write the N best ('i ||| text ||| score')")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="sacreBLEU and chrF against references, BLEU by source length")
    decoding_options(p)
    p.add_argument("--src", required=True, help="source file")
    p.add_argument("--ref", required=True, help="reference translations")
    p.add_argument("--json", help="also write the report as JSON to this file")
    p.add_argument("--hypotheses", help="also write the translations to this file")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("quickstart", help="train a small attention model on dates and show its attention")
    p.add_argument("--dir", default="runs/quickstart", help="where data, model and figures go")
    p.add_argument("--steps", type=_positive, default=500, help="training steps")
    p.add_argument("--attention", default="bahdanau", help="attention variant")
    p.set_defaults(func=cmd_quickstart)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except AttnmtError as e:
        print(f"attnmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnmt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `attnmt translate ... | head`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
