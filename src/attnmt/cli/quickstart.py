"""attnmt quickstart: a small attention model trained on dates (--pairs: a sentence-pair task;
--speech: synthesized speech), and figures of its attention."""

from __future__ import annotations

from pathlib import Path

from attnmt.cli.options import _positive, threads_option
from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser(
        "quickstart",
        help="train a small attention model on dates (or, with --speech, on "
        "speech synthesized with espeak-ng) and show its attention",
    )
    p.add_argument(
        "--dir",
        help="where data, model and figures go (default runs/quickstart, runs/quickstart-pairs "
        "with --pairs, runs/quickstart-speech with --speech)",
    )
    p.add_argument("--steps", type=_positive, help="training steps (default 500; --pairs 3000; --speech 800)")
    p.add_argument("--attention", help="attention variant (default bahdanau; --speech location)")
    p.add_argument(
        "--pairs",
        action="store_true",
        help="instead: the decomposable attention model on a synthetic "
        "sentence-pair task (entailment, contradiction, neutral)",
    )
    p.add_argument(
        "--speech",
        action="store_true",
        help="instead: speech recognition with location-aware attention "
        "on speech synthesized with espeak-ng (docs/speech.md)",
    )
    threads_option(p)
    p.set_defaults(func=run)


def run(args):
    """The quickstart of the task that --pairs or --speech names, translation without either (a task switch)."""
    if args.pairs:
        from attnmt.pairs.quickstart import run_pair_quickstart

        folder = args.dir or "runs/quickstart-pairs"
        run_pair_quickstart(Path(folder), **({"steps": args.steps} if args.steps else {}), log=log)
        return
    if args.speech:
        from attnmt.speech.quickstart import run_speech_quickstart

        run_speech_quickstart(
            Path(args.dir or "runs/quickstart-speech"),
            steps=args.steps or 800,
            attention=args.attention or "location",
            log=log,
        )
        return
    from attnmt.translation.quickstart import run_quickstart

    run_quickstart(
        Path(args.dir or "runs/quickstart"), steps=args.steps or 500, attention=args.attention or "bahdanau", log=log
    )
