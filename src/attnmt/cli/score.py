"""attnmt score: how probable a translation model finds given translations (forced decoding), one
score per line, as Marian's scorer and fairseq's --score-reference give them."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Iterator

from attnmt.cli.models import known_tag, load_model
from attnmt.cli.options import MAX_TOKENS, model_options, tag_file_option
from attnmt.cli.streams import LazyOutput, input_lines, lines_together, log, renumbered
from attnmt.cli.translate import CHUNK_LINES as TRANSLATED_LINES
from attnmt.cli.translate import chunks
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
    from attnmt.core.progress import phase_bar

    if args.backward and args.normalize:
        raise AttnmtError("--backward writes the dual score, which is per token already: leave out --normalize")
    if args.tag_file is not None and args.tag:
        raise AttnmtError("give --tag (one tag for every line) or --tag-file (a tag for each line), not both")
    pairs, name = read_pairs(args)
    first = list(itertools.islice(pairs, CHUNK_LINES))  # (an error in these lines: before the model is loaded)
    if not first and args.src is None:
        raise AttnmtError(f"{name}: no lines to score")
    model = load_model(args)
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: attnmt score scores translations of text; this is {model.what}")
    backward = backward_model(args) if args.backward else None
    totals = {"target": Totals(), "source": Totals()}
    with LazyOutput(args.output) as out, phase_bar(itertools.chain(first, pairs), "scoring", unit="line") as lines:
        try:
            for chunk in itertools.chain(chunks(lines, CHUNK_LINES), [] if first else [[]]):
                scored = scored_chunk(model, backward, chunk, args, name)
                out.write(score_lines(scored, args))
                totals["target"].add([s.forward for s in scored] if backward else scored)
                totals["source"].add([s.backward for s in scored] if backward else [])
        except AttnmtError as error:
            if out.lines:
                raise AttnmtError(f"{error} (the scores of the {out.lines} pairs before were written)") from None
            raise
    log(summary(totals["target"], "target"))
    if backward is not None:
        log(summary(totals["source"], "source"))


# Pairs read, scored and written at a time, as translate reads its lines (CHUNK_LINES): a file or
# stream of any length is scored in the memory of this many pairs, and its scores are written in
# order as each chunk is done (Translator.score sorts each chunk's pairs by length into batches)
CHUNK_LINES = TRANSLATED_LINES


def scored_chunk(model, backward, chunk: list[Pair], args, name: str) -> list:
    """The ScoredTranslation of each pair of ``chunk`` (with ``backward``, a target->source model:
    its DualScore), in order; an error about one of them names its line."""
    from attnmt.translation.filtering import dual_scores

    sources, translations = [p.source for p in chunk], [p.translation for p in chunk]
    tag = args.tag if args.tag_file is None else [known_tag(args, model, p.number, p.tag.strip()) for p in chunk]
    try:
        if backward is not None:
            return dual_scores(model, backward, sources, translations, args.batch_size, args.max_tokens, tag=tag)
        return model.score(sources, translations, batch_size=args.batch_size, max_tokens=args.max_tokens, tag=tag)
    except AttnmtError as error:  # ("pair N" of the chunk: pair and line N of the files)
        raise AttnmtError(f"{name}: {renumbered(str(error), chunk[0].number if chunk else 1)[0]}") from None


def backward_model(args):
    from attnmt.api import load
    from attnmt.cli.models import quantize

    return load(args.backward, args.checkpoint, quantize=quantize(args), device=args.device)


class Totals:
    """What summary prints of the pairs scored so far, summed as each chunk is scored."""

    def __init__(self):
        self.count, self.tokens, self.log_prob = 0, 0, 0.0

    def add(self, scored):
        self.count += len(scored)
        self.tokens += sum(len(s.tokens) for s in scored)
        self.log_prob = math.fsum([self.log_prob, *(s.log_prob for s in scored)])


def summary(totals: Totals, side: str) -> str:
    per_token = totals.log_prob / max(totals.tokens, 1)
    return (
        f"scored {totals.count} {'translations' if side == 'target' else 'sources (backward)'}, {totals.tokens} "
        f"{side} tokens: log-probability per token {per_token:.4f}, perplexity {math.exp(-per_token):.2f}"
    )


@dataclass
class Pair:
    """A pair to score, line ``number`` (from 1) of its files."""

    number: int
    source: str
    translation: str
    tag: str | None = None  # the line of --tag-file


def read_pairs(args) -> tuple[Iterator[Pair], str]:
    """The pairs of --src/--tgt or of --input's columns (with their line of --tag-file), read as
    streams, and where they come from. An error names the file and line: a line without the
    columns, or files of different line counts (where the first ends)."""
    from attnmt.data.corpus import stream_lines

    if (args.src is None) != (args.tgt is None) or (args.src and args.input):
        raise AttnmtError(
            "give --src and --tgt (two line-aligned files), or tab-separated lines (--input FILE, or stdin)"
        )
    if args.src:
        name, files = (
            f"{args.src}, {args.tgt}",
            [(args.src, stream_lines(args.src)), (args.tgt, stream_lines(args.tgt))],
        )
    else:
        name = args.input if args.input not in (None, "-") else "<stdin>"
        if min(args.src_column, args.tgt_column) < 0 or args.src_column == args.tgt_column:
            raise AttnmtError(
                f"--src-column {args.src_column} and --tgt-column {args.tgt_column}: two different columns, "
                "counting from 0"
            )
        files = [(name, (line.text for line in input_lines(args.input)))]
    note = ""
    if args.tag_file is not None:
        files.append((args.tag_file, stream_lines(args.tag_file)))
        note = " (--tag-file: one line, maybe empty, for each source line)"
    return pairs_of(args, name, lines_together(files, note)), name


def pairs_of(args, name: str, lines: Iterator[tuple[int, list[str]]]) -> Iterator[Pair]:
    needed = max(args.src_column, args.tgt_column) + 1
    for number, texts in lines:
        tag = texts[-1] if args.tag_file is not None else None
        if args.src:
            yield Pair(number, texts[0], texts[1], tag)
            continue
        columns = texts[0].split("\t")
        if len(columns) < needed:
            raise AttnmtError(
                f"{name}, line {number}: {len(columns)} tab-separated column(s), expected at least "
                f"{needed} (source in column {args.src_column}, translation in {args.tgt_column})"
            )
        yield Pair(number, columns[args.src_column], columns[args.tgt_column], tag)


def score_lines(scored, args) -> list[str]:
    """A line per pair: its score (with --backward the dual score), or with --jsonl all of it."""
    lines = []
    for s in scored:
        if args.jsonl:
            fields = (
                {"score": s.score, "forward": as_json(s.forward), "backward": as_json(s.backward)}
                if args.backward
                else as_json(s)
            )
            lines.append(json.dumps(fields, ensure_ascii=False))
        else:
            lines.append(f"{value_of(s, args):.6f}")
    return lines


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
