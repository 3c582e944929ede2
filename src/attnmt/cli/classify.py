"""attnmt classify: premise<TAB>hypothesis lines -> label and probabilities (sentence-pair models)."""

from __future__ import annotations

from attnmt.cli.options import MAX_TOKENS, _positive, checkpoint_option, device_option, input_output_options
from attnmt.cli.streams import log, read_input, write_lines
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "classify",
        help="sentence-pair model: premise<TAB>hypothesis lines -> label and "
        "probabilities, one output line per input line",
    )
    p.add_argument("model_dir", help="folder of a trained sentence-pair model (task: pairs)")
    p.add_argument("--batch-size", type=_positive, default=None, help="pairs per batch")
    checkpoint_option(p)
    p.add_argument(
        "--max-tokens",
        type=_positive,
        default=MAX_TOKENS,
        help=f"a sentence of more subword tokens is cut to this many, with a warning (default {MAX_TOKENS})",
    )
    device_option(p)
    input_output_options(p)
    p.set_defaults(func=run)


def run(args):
    """premise<TAB>hypothesis lines -> label and probabilities, one output line per input line."""
    from attnmt.api import load
    from attnmt.pairs.classifier import classify_lines

    model = load(args.model_dir, args.checkpoint, device=args.device)
    require_pair_classifier(model, args)
    outputs, errors, warnings = classify_lines(model, read_input(args.input), args.batch_size or 64, args.max_tokens)
    write_lines(args.output, outputs)
    for message in warnings:
        log(f"attnmt: warning: {message}")
    if errors:
        raise AttnmtError(
            f"{len(errors)} of {len(outputs)} line(s) not classified (ERROR lines in the output); first: {errors[0]}"
        )


def require_pair_classifier(model, args):
    """Only a sentence-pair model classifies."""
    if model.inputs != "pairs":
        raise AttnmtError(f"{args.model_dir} is {model.what}: use attnmt translate")
