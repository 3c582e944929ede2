"""A model loaded as the decoding options say (translate, evaluate), and lines translated with a
warning for each line cut to --max-tokens. Imports no command module."""

from __future__ import annotations

from attnmt.cli.streams import log
from attnmt.core.config import MAX_CONSTRAINTS
from attnmt.core.errors import AttnmtError


def quantize(args) -> str | None:
    return "int8" if args.int8 else "bf16" if args.bf16 else None


def load_model(args):
    from attnmt.api import load

    model = load(args.model_dir, args.checkpoint, quantize=quantize(args), device=args.device)
    if getattr(args, "ensemble", None):
        if model.inputs != "text":
            raise AttnmtError(f"{args.model_dir}: --ensemble is for translation models")
        model.ensemble(
            [load(folder, args.checkpoint, quantize=quantize(args), device=args.device) for folder in args.ensemble]
        )
    apply_decoding_options(model, args)
    return model


def apply_decoding_options(model, args):
    """--attention-window, --length-penalty, --coverage-penalty, --tag, --mask-heads and --shortlist,
    given, on the models they are for."""
    from attnmt.seq2seq.loaded import LoadedSeq2Seq

    settings = {name: getattr(args, name, None) for name in ("attention_window", "length_penalty", "coverage_penalty")}
    settings = {name: value for name, value in settings.items() if value is not None}
    if settings:
        if not isinstance(model, LoadedSeq2Seq):  # (a translation or a speech model)
            option = "--" + next(iter(settings)).replace("_", "-")
            raise AttnmtError(
                f"{args.model_dir}: {option} is for models that decode; this is a sentence-pair classifier"
            )
        model.set_decoding(**settings)
    if getattr(args, "tag", None):
        if model.inputs != "text":
            raise AttnmtError(f"{args.model_dir}: --tag is for translation models")
        model.source_ids([""], args.tag)  # (an unknown tag: an error before any work)
    if getattr(args, "mask_heads", None):
        if model.inputs != "text":
            raise AttnmtError(f"{args.model_dir}: --mask-heads is for translation models")
        model.mask_heads(args.mask_heads)
    if getattr(args, "shortlist", None) is not None:
        if model.inputs != "text":
            raise AttnmtError(f"{args.model_dir}: --shortlist is for translation models")
        model.shortlist = True if args.shortlist == "" else args.shortlist


def known_tag(args, model, number: int, tag: str) -> str:
    """``tag``, line ``number`` of --tag-file, if it is "" (none) or one of the model's tags."""
    if tag and tag not in model.tags:
        known = f"its tags are {', '.join(model.tags)}" if model.tags else "it was trained without tags"
        raise AttnmtError(f"{args.tag_file}, line {number}: {tag!r} is not a tag of {args.model_dir} ({known})")
    return tag


def translate_lines(
    model,
    lines: list[str],
    args,
    n_best: int = 1,
    name: str = "input",
    first: int = 1,
    tag: str | list[str] | None = None,
    prefix: list[str] | None = None,
    constraints: list[list[str]] | None = None,
    progress: str | None = "translating",
):
    """The translations of ``lines`` (line ``first`` of ``name`` and those after it), with ``tag``
    (default --tag), each line's ``prefix`` and ``constraints``; every line, prefix and constraint
    list cut to --max-tokens subword pieces (Translator.translate), with a warning naming the line."""
    translations = model.translate(
        lines,
        beam=args.beam,
        n_best=n_best,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        progress=progress,
        sampling=getattr(args, "sampling", None),
        prefix=prefix,
        constraints=constraints,
        tag=args.tag if tag is None else tag,
    )
    limit = args.max_tokens
    for number, t in enumerate(translations, start=first):
        if t.truncated:
            log(
                f"attnmt: warning: {name}, line {number}: more than {limit} subword tokens; its first "
                f"{limit} were translated (--max-tokens)"
            )
        if "prefix" in t.cut:
            log(
                f"attnmt: warning: {args.prefix}, line {number}: more than {limit} subword tokens; its first "
                f"{limit} were forced (--max-tokens)"
            )
        if "constraints" in t.cut:
            log(
                f"attnmt: warning: {args.constraints}, line {number}: more than {MAX_CONSTRAINTS} phrases or "
                f"{limit} subword tokens in all; only its first phrases within both were kept (--max-tokens)"
            )
    return translations


def check_rerank(args, model, beam: int):
    """AttnmtError for --rerank (--rerank-weight) where it cannot rerank."""
    if args.rerank_weight is not None and not args.rerank:
        raise AttnmtError("--rerank-weight weighs the backward model of --rerank: give --rerank DIR too")
    if not args.rerank:
        return
    if model.inputs != "text":
        raise AttnmtError(f"{args.model_dir}: --rerank is for translation models")
    if getattr(args, "sampling", None) is not None or beam < 2:
        raise AttnmtError(
            "--rerank reorders the candidates of a beam search: give a --beam of 2 or more (and no --sample)"
        )


def reranker(model, args):
    """translations -> those translations with their candidates reranked by --rerank's backward model."""
    from functools import partial

    from attnmt.api import load
    from attnmt.translation.reranking import WEIGHT, rerank

    backward = load(args.rerank, args.checkpoint, quantize=quantize(args), device=args.device)
    weight = WEIGHT if args.rerank_weight is None else args.rerank_weight
    return partial(rerank, model, backward, weight=weight, batch_size=args.batch_size, tag=args.tag)
