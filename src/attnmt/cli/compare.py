"""attnmt compare: variants of a config trained on the same data, subwords and budget, scored side by side."""

from __future__ import annotations

from attnmt.cli.options import _beam, _positive, _positive_float
from attnmt.cli.streams import log
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "compare",
        help="train variants of a config on the same data, subwords and budget; "
        "score them side by side (docs/experiments.md)",
    )
    p.add_argument("config", help="experiment YAML file (its data.test: the test sets)")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="FIELD=V1,V2",
        help="a grid: every combination of the values of each --vary",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:FIELD=V,... | NAME=OVERRIDES.yaml[:FIELD=V,...]",
        help="one variant: fields set inline, or a partial config merged over CONFIG (with fields set over it)",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=_positive, help="training steps of every run (default: the config's limits)")
    budget.add_argument("--minutes", type=_positive_float, help="minutes of training of every run")
    p.add_argument("--seeds", type=_positive, default=1, help="runs per variant, seeds training.seed, +1, ...")
    p.add_argument("--out", required=True, help="folder of the runs and the results")
    p.add_argument("--resume", action="store_true", help="continue an unfinished run (finished ones are skipped)")
    p.add_argument(
        "--join",
        default="",
        metavar="K,K",
        help="also score each test set with consecutive sentences joined K at a time, e.g. 2,3,4",
    )
    p.add_argument("--beam", type=_beam, help="beam of the test translations (default: config)")
    p.add_argument(
        "--align-pairs",
        metavar="FILE",
        help="'source ||| target' lines of a word-alignment gold set: their text is added to the training text",
    )
    p.add_argument("--align-gold", metavar="FILE", help="their gold links (i-j sure, ipj possible): AER per variant")
    p.add_argument("--one-based", action="store_true", help="the gold links count words from 1")
    p.add_argument(
        "--both-directions", action="store_true", help="also train each run target->source, for symmetrized alignments"
    )
    p.add_argument("--align-threshold", type=float, default=0.5, help="weight of a link for threshold alignments")
    p.add_argument("--example", type=_positive, default=1, help="line of the first test set drawn in attention.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args):
    from attnmt.compare import compare

    try:
        join = tuple(int(k) for k in args.join.split(",")) if args.join else ()
    except ValueError:
        raise AttnmtError(f"--join {args.join}: expected whole numbers, e.g. 2,3,4") from None
    compare(
        args.config,
        args.out,
        varies=args.vary,
        variants=args.variant,
        steps=args.steps,
        minutes=args.minutes,
        seeds=args.seeds,
        resume=args.resume,
        join=join,
        beam=args.beam,
        align_pairs=args.align_pairs,
        align_gold=args.align_gold,
        one_based=args.one_based,
        both_directions=args.both_directions,
        threshold=args.align_threshold,
        example=args.example,
        log=log,
        progress=not args.no_progress,
    )
