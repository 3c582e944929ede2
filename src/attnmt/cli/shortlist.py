"""attnmt shortlist: the lexical table of a translation model for vocabulary shortlists."""

from __future__ import annotations

from attnmt.cli.options import _positive
from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser(
        "shortlist",
        help="the lexical table of a translation model for vocabulary shortlists "
        "(MODEL_DIR/shortlist.json), from eflomal's word links of its training "
        "corpus",
    )
    p.add_argument("model_dir", help="folder of a trained translation model; its config names the training corpus")
    p.add_argument("--top", type=_positive, default=50, help="target pieces kept per source piece (default 50)")
    p.add_argument(
        "--frequent",
        type=_positive,
        default=100,
        help="most frequent target pieces, always in the shortlist (default 100)",
    )
    p.set_defaults(func=run)


def run(args):
    from attnmt.translation.shortlist import build_shortlist

    build_shortlist(args.model_dir, args.top, args.frequent, log=log)
