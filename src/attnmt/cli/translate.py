"""attnmt translate: lines from a file or stdin (speech models: lines of sound file paths)."""

from __future__ import annotations

from attnmt.cli.models import check_rerank, load_model, reranker, tags_of, translate_lines
from attnmt.cli.options import (
    _non_negative_int,
    _positive,
    _positive_float,
    _probability,
    decoding_options,
    input_output_options,
    rerank_options,
    tag_file_option,
)
from attnmt.cli.streams import close_output, log, open_output, read_input
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "translate", help="translate lines from a file or stdin (speech models: lines of sound file paths, transcribed)"
    )
    decoding_options(p)
    input_output_options(p)
    p.add_argument("--n-best", type=_positive, default=1, help="write the N best ('i ||| text ||| score')")
    p.add_argument(
        "--report-align",
        action="store_true",
        help="write each output's word links after ' ||| ' (Pharaoh 'i-j': source word i, output word j, "
        "0-based; '</s>' left out), as OpenNMT-py does",
    )
    p.add_argument(
        "--align-file",
        metavar="FILE",
        help="write the word links to FILE, one line per output line (without --report-align: only there)",
    )
    p.add_argument(
        "--align-method",
        choices=["argmax", "threshold"],
        default=None,
        help="argmax: each output word to its most attended source word; threshold: every link with "
        "weight >= --align-threshold (default: argmax for the attention, threshold for an aligner)",
    )
    p.add_argument("--align-threshold", type=float, default=0.5, help="for --align-method threshold")
    p.add_argument(
        "--prefix",
        metavar="FILE",
        help="a start for each input line's translation, line by line (an empty line: none): the search "
        "continues it, as OpenNMT-py's --tgt_prefix (interactive translation)",
    )
    p.add_argument(
        "--constraints",
        metavar="FILE",
        help="words or phrases each input line's translation must contain, line by line, separated by "
        "tabs (an empty line: none): beam search with dynamic beam allocation (Post & Vilar 2018)",
    )
    tag_file_option(p)
    rerank_options(p)
    p.add_argument(
        "--aligner",
        metavar="DIR|none",
        help="read the word links from this alignment layer of the model (attnmt train-aligner); 'none': "
        "from the search's attention. Default: MODEL/aligner if it was trained on these weights, else "
        "the attention (of a Transformer trained by guided alignment: the layer and heads it trained, "
        "each output forced through the model)",
    )
    sampling = p.add_argument_group(
        "sampling",
        "draw each translation from the model instead of searching for "
        "the best (as for back-translation); one output per line",
    )
    sampling.add_argument("--sample", action="store_true", help="sample (beam 1; the options below shape it)")
    sampling.add_argument(
        "--top-k",
        type=_non_negative_int,
        default=0,
        help="draw among the K most probable tokens of each step (default 0: all)",
    )
    sampling.add_argument(
        "--top-p",
        type=_probability,
        default=1.0,
        help="... then among the smallest set of them whose probability reaches P (nucleus sampling; default 1: all)",
    )
    sampling.add_argument(
        "--temperature",
        type=_positive_float,
        default=1.0,
        help="divide the log-probabilities by T: below 1 sharper, above 1 flatter (default 1)",
    )
    sampling.add_argument(
        "--seed",
        type=int,
        help="the same seed, input and --batch-size give the same outputs (default: a new draw each run)",
    )
    p.set_defaults(func=run)


def run(args):
    model = load_model(args)
    args.sampling = sampling_of(args, model)
    beam = 1 if args.sampling is not None else args.beam or model.config.decoding.beam
    if args.n_best > beam:
        raise AttnmtError(
            f"--n-best ({args.n_best}) cannot exceed the beam size ({beam}, from the model's "
            "config); give a larger --beam"
        )
    check_rerank(args, model, beam)
    if args.aligner and not aligned(args):
        raise AttnmtError("--aligner gives the word links of --report-align or --align-file: give one of them")
    if args.aligner:
        model.aligner = None if args.aligner == "none" else output_aligner(args.aligner, model)
    lines = read_input(args.input)
    args.tag = tags_of(args, model, len(lines), args.input or "<stdin>")
    args.prefixes = prefixes_of(args, model, len(lines))
    args.phrases = constraints_of(args, model, len(lines))
    translations, unusable = decode_for_task(model, lines, args)
    if aligned(args):
        translations = model.align_outputs(
            translations, args.n_best, method=args.align_method, threshold=args.align_threshold
        )
    write_translations(translations, args)
    if unusable:
        first = min(unusable)
        raise AttnmtError(
            f"{len(unusable)} of {len(lines)} sound file(s) not transcribed (empty lines in the output); "
            f"first: line {first + 1}: {unusable[first]}"
        )


def sampling_of(args, model):
    """The Sampling of --sample and its options, or None; AttnmtError for options that do not go together."""
    from pydantic import ValidationError

    from attnmt.core.config import Sampling

    shaping = [
        flag
        for flag, given in (
            ("--top-k", args.top_k != 0),
            ("--top-p", args.top_p != 1.0),
            ("--temperature", args.temperature != 1.0),
            ("--seed", args.seed is not None),
        )
        if given
    ]
    if not args.sample:
        if shaping:
            raise AttnmtError(f"{', '.join(shaping)} shape sampling: give --sample too")
        return None
    if args.beam not in (None, 1) or args.n_best != 1:
        raise AttnmtError("--sample draws one translation per line: it takes no --beam or --n-best")
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: --sample is for translation models")
    try:  # (the ranges are Sampling's: the server's are the same)
        return Sampling(top_k=args.top_k, top_p=args.top_p, temperature=args.temperature, seed=args.seed)
    except ValidationError as error:
        field = error.errors()[0]["loc"][0]
        raise AttnmtError(f"--{field.replace('_', '-')} {getattr(args, field)}: {error.errors()[0]['msg']}") from None


def prefixes_of(args, model, count: int) -> list[str] | None:
    """The lines of --prefix, one for each input line; None without it."""
    from attnmt.data.corpus import read_lines

    if args.prefix is None:
        return None
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: --prefix is for translation models")
    prefixes = read_lines(args.prefix)
    if len(prefixes) != count:
        raise AttnmtError(
            f"line counts differ: {args.input or '<stdin>'} has {count} lines, {args.prefix} "
            f"has {len(prefixes)} (--prefix: one line, maybe empty, for each input line)"
        )
    return prefixes


def constraints_of(args, model, count: int) -> list[list[str]] | None:
    """The phrases of --constraints (tab-separated), one line for each input line; None without it."""
    from attnmt.data.corpus import read_lines

    if args.constraints is None:
        return None
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: --constraints is for translation models")
    if args.sampling is not None:
        raise AttnmtError("--sample draws translations as the model writes them: it takes no --constraints")
    lines = read_lines(args.constraints)
    if len(lines) != count:
        raise AttnmtError(
            f"line counts differ: {args.input or '<stdin>'} has {count} lines, {args.constraints} "
            f"has {len(lines)} (--constraints: one line, maybe empty, for each input line)"
        )
    phrases = [[phrase for phrase in line.split("\t") if phrase.strip()] for line in lines]
    for number, (line, found) in enumerate(zip(lines, phrases), start=1):
        if line.strip() and len(found) != line.count("\t") + 1:
            raise AttnmtError(f"{args.constraints}, line {number}: an empty phrase between tabs")
    return phrases


def decode_for_task(model, lines: list[str], args) -> tuple[list, dict[int, str]]:
    """The translations of the lines (a model of audio: the transcripts of the sound files they name),
    and the lines whose sound file was not transcribed: index -> why."""
    if aligned(args) and model.inputs == "audio":
        raise AttnmtError(
            "--report-align links the words of a text and of its translation: a speech model has no source words"
        )
    if model.inputs != "audio":
        if args.rerank:  # every candidate of the beam, reranked; the n best of them written
            return reranker(model, args)(
                translate_lines(model, lines, args, args.beam or model.config.decoding.beam, args.input or "<stdin>")
            ), {}
        return translate_lines(model, lines, args, args.n_best, args.input or "<stdin>"), {}
    translations, unusable = model.transcribe_files(
        lines, beam=args.beam, n_best=args.n_best, batch_size=args.batch_size
    )
    for i, message in unusable.items():
        log(f"attnmt: warning: {args.input or '<stdin>'}, line {i + 1}: {message}; an empty line written")
    return translations, unusable


def aligned(args) -> bool:
    return bool(args.report_align or args.align_file)


def output_aligner(folder, model):
    from attnmt.translation.aligner import OutputAligner

    return OutputAligner(folder, model)


def write_translations(translations, args):
    """The N best of each to --output, with their word links (filled in by Translator.align_outputs)
    after ' ||| ' and/or in --align-file."""
    from attnmt.translation.align import format_pharaoh

    out = open_output(args.output)
    links = open_output(args.align_file) if args.align_file else None
    try:
        for i, t in enumerate(translations):
            for c in t.candidates[: args.n_best]:
                line = c.text if args.n_best == 1 else f"{i} ||| {c.text} ||| {c.score:.4f}"  # Moses n-best format
                if aligned(args):  # the output's word links, after " ||| " as OpenNMT-py writes them, or to their file
                    if c.alignment is None:
                        raise AttnmtError(
                            "--report-align reads the attention, and this model has attention 'none': give an --aligner"
                        )
                    pharaoh = format_pharaoh(c.alignment)
                    line += f" ||| {pharaoh}" if args.report_align else ""
                    if links is not None:
                        links.write(pharaoh + "\n")
                out.write(line + "\n")
    finally:
        for stream in (out, links):
            close_output(stream)
