"""attnmt score: how probable a translation model finds given translations (forced decoding), one
score per line, as Marian's scorer and fairseq's --score-reference give them."""

from __future__ import annotations

import json
import math

from attnmt.cli.models import load_model, tags_of
from attnmt.cli.options import MAX_TOKENS, model_options, tag_file_option
from attnmt.cli.streams import close_output, log, open_output, read_input, read_line_pairs
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "score",
        help="the log-probability a translation model gives each given translation "
        "(forced decoding): for filtering a corpus, reranking, perplexity",
    )
    model_options(
        p,
        max_tokens=f"a pair with more subword tokens on either side is an error, never scored cut "
        f"short (default {MAX_TOKENS})",
    )
    p.add_argument("--src", help="source sentences (with --tgt)")
    p.add_argument("--tgt", help="their translations, line by line")
    p.add_argument(
        "-i",
        "--input",
        help="instead of --src/--tgt: tab-separated lines, source and translation (plain or .gz; default stdin)",
    )
    p.add_argument("--src-column", type=int, default=0, help="of --input, counting from 0 (default 0)")
    p.add_argument("--tgt-column", type=int, default=1, help="of --input (default 1)")
    p.add_argument("-o", "--output", help="output file; default stdout")
    tag_file_option(p)
    p.add_argument(
        "--backward",
        metavar="MODEL_DIR",
        help="a target->source model: write the dual conditional cross-entropy score of Junczys-Dowmunt "
        "(2018), -(|H_f - H_b| + (H_f + H_b) / 2) with H each model's negative log-probability per "
        "token, for filtering a corpus (the same --checkpoint and --device; --ensemble models are "
        "forward ones)",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--normalize",
        action="store_true",
        help="write the log-probability per token (the sum over the translation's subword tokens and "
        "its end of sentence, divided by their number): scores of different lengths compare",
    )
    shown.add_argument(
        "--jsonl",
        action="store_true",
        help="write a JSON object per line: log_prob, per_token, tokens and each token's log_prob "
        "(with --backward: score, and those of each direction as forward and backward)",
    )
    p.set_defaults(func=run)


def run(args):
    if args.backward and args.normalize:
        raise AttnmtError("--backward writes the dual score, which is per token already: leave out --normalize")
    sources, translations, name = read_pairs(args)
    model = load_model(args)
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: attnmt score scores translations of text; this is {model.what}")
    args.tag = tags_of(args, model, len(sources), name)
    try:
        if args.backward:
            scored = dual(model, sources, translations, args)
        else:
            scored = model.score(
                sources,
                translations,
                batch_size=args.batch_size,
                max_tokens=args.max_tokens,
                progress="scoring",
                tag=args.tag,
            )
    except AttnmtError as error:
        raise AttnmtError(f"{name}: {error}") from None
    write_scores(scored, args)
    if args.backward:
        log(summary([s.forward for s in scored], "target"))
        log(summary([s.backward for s in scored], "source"))
    else:
        log(summary(scored, "target"))


def dual(model, sources: list[str], translations: list[str], args):
    from attnmt.api import load
    from attnmt.cli.models import quantize
    from attnmt.translation.filtering import dual_scores

    backward = load(args.backward, args.checkpoint, quantize=quantize(args), device=args.device)
    return dual_scores(
        model, backward, sources, translations, args.batch_size, args.max_tokens, progress=True, tag=args.tag
    )


def summary(scored, side: str) -> str:
    tokens = sum(len(s.tokens) for s in scored)
    per_token = math.fsum(s.log_prob for s in scored) / max(tokens, 1)
    return (
        f"scored {len(scored)} {'translations' if side == 'target' else 'sources (backward)'}, {tokens} {side} "
        f"tokens: log-probability per token {per_token:.4f}, perplexity {math.exp(-per_token):.2f}"
    )


def read_pairs(args) -> tuple[list[str], list[str], str]:
    """The sources and translations of --src/--tgt or of --input's columns, and where they come from."""
    if (args.src is None) != (args.tgt is None) or (args.src and args.input):
        raise AttnmtError(
            "give --src and --tgt (two line-aligned files), or tab-separated lines (--input FILE, or stdin)"
        )
    if args.src:
        return *read_line_pairs(args.src, args.tgt), f"{args.src}, {args.tgt}"
    name = args.input if args.input not in (None, "-") else "<stdin>"
    if min(args.src_column, args.tgt_column) < 0 or args.src_column == args.tgt_column:
        raise AttnmtError(
            f"--src-column {args.src_column} and --tgt-column {args.tgt_column}: two different columns, counting from 0"
        )
    needed = max(args.src_column, args.tgt_column) + 1
    sources, translations = [], []
    for number, line in enumerate(read_input(args.input), start=1):
        columns = line.split("\t")
        if len(columns) < needed:
            raise AttnmtError(
                f"{name}, line {number}: {len(columns)} tab-separated column(s), expected at least "
                f"{needed} (source in column {args.src_column}, translation in {args.tgt_column})"
            )
        sources.append(columns[args.src_column])
        translations.append(columns[args.tgt_column])
    if not sources:
        raise AttnmtError(f"{name}: no lines to score")
    return sources, translations, name


def write_scores(scored, args):
    """A line per pair: its score (with --backward the dual score), or with --jsonl all of it."""
    out = open_output(args.output)
    try:
        for s in scored:
            if args.jsonl:
                fields = (
                    {"score": s.score, "forward": as_json(s.forward), "backward": as_json(s.backward)}
                    if args.backward
                    else as_json(s)
                )
                out.write(json.dumps(fields, ensure_ascii=False) + "\n")
            else:
                out.write(f"{value_of(s, args):.6f}\n")
    finally:
        close_output(out)


def value_of(scored, args) -> float:
    """The number of a pair's line: the dual score (--backward), the log-probability per token
    (--normalize) or the log-probability."""
    if args.backward:
        return scored.score
    return scored.per_token if args.normalize else scored.log_prob


def as_json(s) -> dict:
    return {
        "log_prob": s.log_prob,
        "per_token": s.per_token,
        "tokens": s.tokens,
        "token_log_probs": s.log_probs.tolist(),
    }
