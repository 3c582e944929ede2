"""attnmt translate: lines from a file or stdin (speech models: lines of sound file paths)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from attnmt.cli.models import check_rerank, known_tag, load_model, reranker, translate_lines
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
from attnmt.cli.streams import LINE_BYTES_PER_TOKEN, close_output, input_lines, log, open_output
from attnmt.core.errors import AttnmtError

if TYPE_CHECKING:
    from attnmt.data.corpus import Line


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
    from attnmt.core.progress import phase_bar

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
    check_line_files(args, model)
    rerank = reranker(model, args) if args.rerank else None
    unusable, count = {}, 0
    with Written(args) as written, phase_bar(read_together(args, model), "translating", unit="line") as lines:
        for chunk in chunks(lines, CHUNK_LINES):
            translations, failed = decode_for_task(model, chunk, args, rerank)
            if aligned(args):
                translations = model.align_outputs(
                    translations, args.n_best, method=args.align_method, threshold=args.align_threshold
                )
            written.write(translations, chunk[0].number)
            unusable.update(failed)
            count += len(chunk)
    if unusable:
        first = min(unusable)
        raise AttnmtError(
            f"{len(unusable)} of {count} sound file(s) not transcribed (empty lines in the output); "
            f"first: line {first}: {unusable[first]}"
        )


# Lines read, translated and written at a time: translations are written as they are done, and a
# file or stream of any length is translated in the memory of this many lines (each within
# --max-tokens), enough for batches of similar lengths (translate sorts each chunk's lines by length)
CHUNK_LINES = 1024


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size``; when reading them fails (AttnmtError: a bad line), the items
    read before it come first, so that their translations are written before the error."""
    iterator = iter(items)
    while True:
        chunk = []
        try:
            chunk.extend(itertools.islice(iterator, size))
        except AttnmtError:
            if chunk:
                yield chunk
            raise
        if not chunk:
            return
        yield chunk


@dataclass
class InputLine:
    """A line of the input (from 1), with what the files of one line per input line give it."""

    number: int
    text: str
    tag: str | None = None  # --tag-file's ("": none)
    prefix: str | None = None  # --prefix's ("": none)
    phrases: list[str] | None = None  # --constraints' ([]: none)


LINE_FILES = ("tag_file", "prefix", "constraints")  # the options that name a file of one line per input line


def check_line_files(args, model):
    """AttnmtError for a file of one line per input line that the model or the other options do not take."""
    for option in LINE_FILES:
        if getattr(args, option) is not None and model.inputs != "text":
            raise AttnmtError(f"{args.model_dir}: --{option.replace('_', '-')} is for translation models")
    if args.tag_file is not None and args.tag:
        raise AttnmtError("give --tag (one tag for every line) or --tag-file (a tag for each line), not both")
    if args.constraints is not None and args.sampling is not None:
        raise AttnmtError("--sample draws translations as the model writes them: it takes no --constraints")


def read_together(args, model) -> Iterator[InputLine]:
    """The input's lines with those of --tag-file, --prefix and --constraints, read together as
    streams, each line cut to --max-tokens x LINE_BYTES_PER_TOKEN bytes before it is decoded (with a
    warning naming it); AttnmtError for a line a file of them cannot have, or files of different
    line counts, at the line where it is found (the lines before it are written)."""
    from attnmt.data.corpus import bounded_lines

    name, bound = args.input or "<stdin>", args.max_tokens * LINE_BYTES_PER_TOKEN
    files = {option: getattr(args, option) for option in LINE_FILES if getattr(args, option) is not None}
    streams = [input_lines(args.input, bound), *(bounded_lines(path, path, bound) for path in files.values())]
    names = [name, *files.values()]
    for number, lines in enumerate(itertools.zip_longest(*streams), start=1):
        if None in lines:  # (one of the files has ended, and another has not)
            ended, longer = lines.index(None), next(i for i, line in enumerate(lines) if line is not None)
            option = list(files)[max(ended, longer) - 1]  # (the input is stream 0)
            raise AttnmtError(
                f"line counts differ: {names[ended]} has {number - 1} lines, {names[longer]} has more (--"
                f"{option.replace('_', '-')}: one line, maybe empty, for each input line); the first "
                f"{number - 1} lines were translated"
            )
        for file, line in zip(names, lines):
            if line.cut:
                log(
                    f"attnmt: warning: {file}, line {number}: more than {bound:,} bytes; its first {bound:,} "
                    f"were read (--max-tokens {args.max_tokens} x {LINE_BYTES_PER_TOKEN})"
                )
        sides = dict(zip(files, lines[1:]))
        yield InputLine(
            number,
            lines[0].text,
            None if "tag_file" not in sides else known_tag(args, model, number, sides["tag_file"].text.strip()),
            None if "prefix" not in sides else writable_prefix(args, model, number, sides["prefix"].text),
            None if "constraints" not in sides else phrases_of_line(args, number, sides["constraints"]),
        )


def writable_prefix(args, model, number: int, prefix: str) -> str:
    """``prefix``, line ``number`` of --prefix, if the model's target pieces can write it."""
    from attnmt.seq2seq.prefix import UNWRITABLE, unwritable

    if unwritable(model.tgt_subwords, [prefix]):
        raise AttnmtError(f"{args.prefix}, line {number}: {prefix[:100]!r} {UNWRITABLE}")
    return prefix


def phrases_of_line(args, number: int, line: Line) -> list[str]:
    """The phrases of line ``number`` of --constraints, separated by tabs; of a line cut (too long),
    those before the last tab (the last may have been cut in two)."""
    text = line.text.rpartition("\t")[0] if line.cut else line.text
    phrases = [phrase for phrase in text.split("\t") if phrase.strip()]
    if text.strip() and len(phrases) != text.count("\t") + 1:
        raise AttnmtError(f"{args.constraints}, line {number}: an empty phrase between tabs")
    return phrases


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


def decode_for_task(model, lines: list[InputLine], args, rerank=None) -> tuple[list, dict[int, str]]:
    """The translations of the lines (a model of audio: the transcripts of the sound files they name),
    their candidates reordered by ``rerank`` if given (--rerank), and the lines whose sound file was
    not transcribed: line number -> why."""
    if aligned(args) and model.inputs == "audio":
        raise AttnmtError(
            "--report-align links the words of a text and of its translation: a speech model has no source words"
        )
    name, texts, first = args.input or "<stdin>", [line.text for line in lines], lines[0].number
    if model.inputs != "audio":
        sides = dict(
            tag=[line.tag for line in lines] if args.tag_file else None,
            prefix=[line.prefix for line in lines] if args.prefix else None,
            constraints=[line.phrases for line in lines] if args.constraints else None,
        )
        if rerank is not None:  # every candidate of the beam, reranked (scored with their tags); the n best written
            beam = args.beam or model.config.decoding.beam
            translations = translate_lines(model, texts, args, beam, name, first, **sides, progress=None)
            return rerank(translations, tag=args.tag if sides["tag"] is None else sides["tag"]), {}
        return translate_lines(model, texts, args, args.n_best, name, first, **sides, progress=None), {}
    translations, unusable = model.transcribe_files(
        texts, beam=args.beam, n_best=args.n_best, batch_size=args.batch_size
    )
    unusable = {first + i: message for i, message in unusable.items()}
    for number, message in unusable.items():
        log(f"attnmt: warning: {name}, line {number}: {message}; an empty line written")
    return translations, unusable


def aligned(args) -> bool:
    return bool(args.report_align or args.align_file)


def output_aligner(folder, model):
    from attnmt.translation.aligner import OutputAligner

    return OutputAligner(folder, model)


class Written:
    """--output (and --align-file), opened when the first translations are written (an error in the
    first lines leaves a file of that name as it was) and flushed after each chunk, so that what is
    done can be read while the rest is translated."""

    def __init__(self, args):
        self.args, self.out, self.links = args, None, None

    def __enter__(self) -> Written:
        return self

    def __exit__(self, *exc):
        for stream in (self.out, self.links):
            close_output(stream)

    def write(self, translations, first: int):
        """The N best of each translation, line ``first`` of the input and those after it, with their
        word links (filled in by Translator.align_outputs) after ' ||| ' and/or in --align-file."""
        from attnmt.translation.align import format_pharaoh

        args = self.args
        if self.out is None:
            self.out = open_output(args.output)
            self.links = open_output(args.align_file) if args.align_file else None
        for i, t in enumerate(translations, start=first - 1):  # (the n-best index counts from 0)
            for c in t.candidates[: args.n_best]:
                line = c.text if args.n_best == 1 else f"{i} ||| {c.text} ||| {c.score:.4f}"  # Moses n-best format
                if aligned(args):  # the output's word links, after " ||| " as OpenNMT-py writes them, or to their file
                    if c.alignment is None:
                        raise AttnmtError(
                            "--report-align reads the attention, and this model has attention 'none': give an --aligner"
                        )
                    pharaoh = format_pharaoh(c.alignment)
                    line += f" ||| {pharaoh}" if args.report_align else ""
                    if self.links is not None:
                        self.links.write(pharaoh + "\n")
                self.out.write(line + "\n")
        for stream in (self.out, self.links):
            if stream is not None:
                stream.flush()
