"""What several commands share: the argument types and the option groups (device, threads,
decoding, ...). Imports no command module.

The argument types keep their names: argparse writes them in its messages ("invalid _positive
value: 'x'")."""

from __future__ import annotations

import argparse

from attnmt.core.config import MAX_BEAM

MAX_TOKENS = 1000  # subword tokens of one line: the work of a line grows with its square (attention)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _beam(text: str) -> int:
    value = _positive(text)
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BEAM}, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return int(text)


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a probability in (0, 1], got {text!r}")
    return value


def _head_list(text: str) -> list[int]:
    try:
        heads = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected head numbers separated by commas (e.g. 0,2), got {text!r}"
        ) from None
    if any(h < 0 for h in heads):
        raise argparse.ArgumentTypeError(f"head numbers count from 0, got {text!r}")
    return heads


def window_argument(text: str) -> tuple[int, int]:
    """ "2,8" -> (2, 8): --attention-window LEFT,RIGHT (also benchmarks/speech_length.py --window)."""
    try:
        left, right = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give LEFT,RIGHT, two whole numbers >= 0, e.g. 2,8") from None
    if left < 0 or right < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: LEFT and RIGHT must be >= 0")
    return left, right


def device_option(p):
    p.add_argument(
        "--device",
        default="cpu",
        help="where the model runs: cpu (default), cuda or cuda:N (GPU figures: docs/performance.md)",
    )


def threads_option(p):
    p.add_argument(
        "--threads",
        type=_positive,
        help="CPU threads (default: the usable cores that other work leaves free, at least one)",
    )


def checkpoint_option(p):
    p.add_argument(
        "--checkpoint",
        choices=["best", "last", "averaged"],
        default="best",
        help="best: of the validations; last: of the training's end; averaged: of attnmt average",
    )


def decoding_options(p):
    """MODEL_DIR and how it decodes: translate and evaluate."""
    model_options(
        p, max_tokens=f"a line of more subword tokens is cut to this many, with a warning (default {MAX_TOKENS})"
    )
    p.add_argument("--beam", type=_beam, default=None, help=f"beam size, 1 (greedy) to {MAX_BEAM} (default: config)")
    p.add_argument(
        "--shortlist",
        nargs="?",
        const="",
        metavar="FILE",
        help="vocabulary shortlist: the output layer scores only the likely target pieces of each "
        "batch (MODEL_DIR/shortlist.json, or FILE; build it with 'attnmt shortlist MODEL_DIR'; "
        "default: config, decoding.shortlist)",
    )
    penalty_options(p)


def penalty_options(p):
    """--length-penalty and --coverage-penalty: translate, evaluate and serve."""
    p.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        metavar="ALPHA",
        help="alpha of Wu et al. (2016): scores are log p / ((5 + |y|) / 6)^alpha; 0: none "
        "(default: config, decoding.length_penalty)",
    )
    p.add_argument(
        "--coverage-penalty",
        type=float,
        default=None,
        metavar="BETA",
        help="beta of Wu et al. (2016): + beta * sum over source words of log(min(attention they "
        "received, 1)), against outputs that leave words out; 0: none (default: config, "
        "decoding.coverage_penalty)",
    )


def tag_file_option(p):
    """--tag-file (translate, score): a tag for each source line."""
    p.add_argument(
        "--tag-file",
        metavar="FILE",
        help="a tag for each source line, line by line (an empty line: none), each one the model was "
        "trained with: as --tag, line by line (sources of several domains or styles in one file)",
    )


def model_options(p, max_tokens: str):
    """MODEL_DIR and how it is loaded and run (translate, evaluate, score); ``max_tokens``: the help
    of --max-tokens, which says what happens to a longer line."""
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--batch-size", type=_positive, default=None, help="sentences per batch")
    checkpoint_option(p)
    p.add_argument(
        "--ensemble",
        action="append",
        metavar="MODEL_DIR",
        help="another model of the same language pair and subwords (repeatable): each step's next-token "
        "distribution is the mean of all (ensemble decoding; the same --checkpoint)",
    )
    p.add_argument("--max-tokens", type=_positive, default=MAX_TOKENS, help=max_tokens)
    p.add_argument(
        "--tag",
        metavar="TAG",
        help="put this tag, one the model was trained with (data.extra_train's, e.g. '<BT>'; attnmt info "
        "lists them), before every source: its outputs then follow that corpus (a domain, a style); "
        "with score --backward, the forward model's sources only",
    )
    p.add_argument(
        "--mask-heads",
        metavar="KIND.LAYER.HEAD,...",
        help="a Transformer: switch these attention heads off (their output multiplied by 0; KIND "
        "encoder, decoder or cross, LAYER and HEAD from 0, e.g. cross.2.0,encoder.0.3), to see what "
        "the others do without them (docs/transformer.md)",
    )
    p.add_argument(
        "--attention-window",
        type=window_argument,
        metavar="LEFT,RIGHT",
        help="RNN attention: each step attends only within LEFT positions before and RIGHT after the "
        "median of the previous step's weights (as in Chorowski et al. 2014; default: config, "
        "decoding.attention_window)",
    )
    device_option(p)
    reduced = p.add_mutually_exclusive_group()
    reduced.add_argument(
        "--int8",
        action="store_true",
        help="dynamic int8 quantization of the linear layers, for CPU translation; "
        "BLEU unchanged within a few tenths (docs/performance.md)",
    )
    reduced.add_argument(
        "--bf16",
        action="store_true",
        help="the output layer's product in bfloat16 (faster beam search on CPUs "
        "with AVX512-BF16/AMX; a few translations change)",
    )


def rerank_options(p):
    """--rerank DIR and --rerank-weight W: translate and evaluate."""
    p.add_argument(
        "--rerank",
        metavar="DIR",
        help="a target->source model: the beam's candidates reranked by how well each explains the source, "
        "log p(y|x)/|y| + W log p(x|y)/|x| (noisy-channel reranking; n-best scores are then that); "
        "needs a beam of 2 or more",
    )
    p.add_argument(
        "--rerank-weight",
        type=float,
        default=None,
        metavar="W",
        help="W of --rerank (default 0.25, the best on Multi30k's dev set: tune it on yours)",
    )


def input_output_options(p):
    p.add_argument("-i", "--input", help="input file (plain or .gz); default stdin")
    p.add_argument("-o", "--output", help="output file; default stdout")
