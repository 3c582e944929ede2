"""attnmt align (word alignments from the attention of forced decoding, or from an alignment
layer), attnmt train-aligner (that layer) and attnmt align-score (AER, precision and recall
against a gold file)."""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Iterator

from attnmt.cli.options import _head_list, _positive, checkpoint_option, device_option, threads_option
from attnmt.cli.streams import LazyOutput, lines_together, log, renumbered, write_text
from attnmt.cli.translate import CHUNK_LINES as TRANSLATED_LINES
from attnmt.cli.translate import chunks
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    add_align_parser(subparsers)
    add_train_aligner_parser(subparsers)
    add_align_score_parser(subparsers)


def add_align_parser(subparsers):
    p = subparsers.add_parser("align", help="word alignments from the attention of forced decoding (Pharaoh format)")
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--src", required=True, help="source sentences")
    p.add_argument("--tgt", required=True, help="their translations, line by line")
    p.add_argument("-o", "--output", help="output file; default stdout")
    p.add_argument("--batch-size", type=_positive, default=32, help="sentence pairs per batch")
    checkpoint_option(p)
    device_option(p)
    p.add_argument(
        "--method",
        choices=["argmax", "threshold"],
        default=None,
        help="argmax: each target word to its most attended source word; "
        "threshold: every link with weight >= --threshold (default: argmax for the attention, "
        "threshold with --aligner)",
    )
    p.add_argument("--threshold", type=float, default=0.5, help="for --method threshold")
    p.add_argument(
        "--shift",
        action="store_true",
        help="read each target word's links from the step after it (Shift-Att, Chen et al. 2020)",
    )
    p.add_argument(
        "--layer",
        type=int,
        help="Transformer: the decoder layer whose cross-attention is read (negative: from the last; default the last)",
    )
    p.add_argument("--heads", type=_head_list, help="Transformer: those heads of it, averaged (e.g. 0,2; default all)")
    p.add_argument(
        "--full-context",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Transformer: read a decoder pass that sees the whole target, not only the past (Garg et "
        "al. 2019; default: as the model was trained, training.guided_alignment.full_context)",
    )
    p.add_argument(
        "--backward",
        metavar="MODEL_DIR",
        help="a target->source model: its links, turned around, are symmetrized with the forward model's",
    )
    p.add_argument(
        "--symmetrize",
        choices=["intersection", "union", "grow-diag-final", "mean"],
        default="grow-diag-final",
        help="with --backward (default grow-diag-final); mean: the links where the mean of both "
        "directions' word weights reaches --threshold",
    )
    p.add_argument(
        "--aligner",
        metavar="DIR",
        help="read the links from this alignment layer of the model (attnmt train-aligner) instead of its attention",
    )
    p.add_argument("--backward-aligner", metavar="DIR", help="the same for the --backward model")
    p.add_argument(
        "--saliency",
        nargs="?",
        type=int,
        const=0,
        metavar="SAMPLES",
        help="read the links from gradients instead of attention: how much each source word's embedding "
        "moves each output word's log-probability (gradient x input; with SAMPLES, SmoothGrad over "
        "that many noisy copies); Ding et al. 2019 (docs/alignment.md)",
    )
    p.set_defaults(func=run_align)


def add_train_aligner_parser(subparsers):
    p = subparsers.add_parser(
        "train-aligner", help="train an alignment layer on a frozen translation model (docs/alignment.md)"
    )
    p.add_argument("config", help="aligner YAML file (model: the translation model's folder; see docs/alignment.md)")
    p.add_argument("--device", help="where to train (default: device of the config, cpu)")
    threads_option(p)
    p.set_defaults(func=run_train_aligner)


def add_align_score_parser(subparsers):
    p = subparsers.add_parser("align-score", help="AER, precision and recall of word alignments against a gold file")
    p.add_argument("--gold", required=True, help="gold alignments: i-j sure, i?j or ipj possible links")
    p.add_argument("--hyp", required=True, help="hypothesis alignments (Pharaoh, 0-based)")
    p.add_argument("--one-based", action="store_true", help="the gold file counts words from 1")
    p.add_argument(
        "--json", nargs="?", const="-", help="print the scores as JSON (or, with a file name, also write them there)"
    )
    p.set_defaults(func=run_align_score)


def run_align(args):
    from attnmt.api import load
    from attnmt.core.progress import phase_bar

    pairs = aligned_pairs(args)
    first = list(itertools.islice(pairs, CHUNK_LINES))  # (an error in these lines: before the model is loaded)
    model = load(args.model_dir, args.checkpoint, device=args.device)
    options = dict(
        batch_size=args.batch_size,
        method=args.method,
        threshold=args.threshold,
        shift=args.shift,
        layer=args.layer,
        heads=args.heads,
        full_context=args.full_context,
        saliency=args.saliency,
    )
    if args.backward_aligner and not args.backward:
        raise AttnmtError("--backward-aligner is the alignment layer of the --backward model: give --backward too")
    models = [(model, _aligner(args.aligner, model))]
    if args.backward:
        backward = load(args.backward, args.checkpoint, device=args.device)
        models.append((backward, _aligner(args.backward_aligner, backward)))
    with LazyOutput(args.output) as out, phase_bar(itertools.chain(first, pairs), "aligning", unit="line") as lines:
        try:
            for chunk in itertools.chain(chunks(lines, CHUNK_LINES), [] if first else [[]]):
                out.write(aligned_chunk(models, chunk, args, options))
        except AttnmtError as error:
            if out.lines:
                raise AttnmtError(f"{error} (the links of the {out.lines} pairs before were written)") from None
            raise


# Pairs read, aligned and written at a time, as translate reads its lines (CHUNK_LINES): files of
# any length are aligned in the memory of this many pairs, and their links are written in order as
# each chunk is done (the pairs of a chunk are batched by length). Every option is of each pair
# alone (--backward and --symmetrize too: both directions of a pair are symmetrized together).
CHUNK_LINES = TRANSLATED_LINES


def aligned_pairs(args) -> Iterator[tuple[int, list[str]]]:
    """The lines of --src and --tgt read together as streams: line number, [source, target]."""
    from attnmt.data.corpus import stream_lines

    return lines_together([(args.src, stream_lines(args.src)), (args.tgt, stream_lines(args.tgt))])


def aligned_chunk(models, chunk, args, options) -> list[str]:
    """The links of each pair of ``chunk`` (models: the forward model and its aligner, and the
    --backward one), as Pharaoh lines in order; an error about one of them names its line."""
    from attnmt.translation.align import align, align_both_ways, format_pharaoh

    sources, targets = [pair[0] for _, pair in chunk], [pair[1] for _, pair in chunk]
    (model, aligner), *backward = models
    try:
        if backward:
            aligners = (aligner, backward[0][1])
            links = align_both_ways(model, backward[0][0], sources, targets, args.symmetrize, aligners, **options)
        else:
            links = align(model, sources, targets, aligner=aligner, **options)
    except AttnmtError as error:  # ("pair N" of the chunk: pair and line N of the files)
        message, of_a_pair = renumbered(str(error), chunk[0][0] if chunk else 1)
        raise AttnmtError(f"{args.src}, {args.tgt}: {message}" if of_a_pair else message) from None
    return [format_pharaoh(pair_links) for pair_links in links]


def _aligner(folder, model):
    from attnmt.translation.aligner import load_aligner

    return None if folder is None else load_aligner(folder, model)


def run_train_aligner(args):
    from attnmt.translation.aligner import load_aligner_config, train_aligner

    config = load_aligner_config(args.config)
    if args.device:
        config.device = args.device
    if args.threads:
        config.threads = args.threads
    log(f"aligner written to {train_aligner(config, log)}")


def run_align_score(args):
    from attnmt.translation.align import score_files

    scores = score_files(args.gold, args.hyp, one_based=args.one_based)
    if args.json == "-":
        print(json.dumps(scores, indent=2))
        return
    if args.json:
        write_text(args.json, json.dumps(scores, indent=2) + "\n")
    print(
        f"AER        {scores['aer']:.4f}\nprecision  {scores['precision']:.4f}\n"
        f"recall     {scores['recall']:.4f}\nsentences  {scores['sentences']}"
    )
