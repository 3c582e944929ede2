"""attnmt export: a Transformer to CTranslate2 (--ct2 OUT_DIR, or --format ct2 OUT_DIR) or to Hugging
Face's MarianMTModel (--format huggingface OUT_DIR)."""

from __future__ import annotations

import argparse

from attnmt.cli.options import checkpoint_option
from attnmt.cli.streams import log
from attnmt.core.errors import AttnmtError

FORMATS = {
    "ct2": "CTranslate2 (pip install 'attnmt[ct2]')",
    "huggingface": "a MarianMTModel folder that transformers' from_pretrained loads (pip install 'attnmt[hub]')",
}


class _FormatAndFolder(argparse.Action):
    """--format FORMAT OUT_DIR: the format checked as choices would be (argparse checks no choices of
    an option of two values)."""

    def __call__(self, parser, namespace, values, option_string=None):
        kind, out_dir = values
        if kind not in FORMATS:
            parser.error(f"argument --format: invalid format {kind!r} (choose from {', '.join(FORMATS)})")
        namespace.format, namespace.out_dir = kind, out_dir


class _CT2Folder(argparse.Action):
    """--ct2 OUT_DIR, the first spelling of --format ct2 OUT_DIR."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.format, namespace.out_dir = "ct2", values


def add_parser(subparsers):
    p = subparsers.add_parser(
        "export",
        help="export a Transformer to CTranslate2 (--ct2 OUT_DIR; pip install 'attnmt[ct2]') or as a Hugging Face "
        "MarianMTModel (--format huggingface OUT_DIR; post-norm Marian-like models; pip install 'attnmt[hub]')",
        description="attnmt export MODEL_DIR --ct2 OUT_DIR (the same as --format ct2 OUT_DIR), or "
        "attnmt export MODEL_DIR --format huggingface OUT_DIR: a folder that MarianMTModel.from_pretrained and "
        "MarianTokenizer.from_pretrained load, for a Transformer with model.norm post and model.positions "
        "sinusoidal-halves (attnmt import's, or trained so); other models are refused, naming the field",
    )
    p.add_argument("model_dir", help="folder of a trained (or imported) Transformer model")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--format",
        nargs=2,
        action=_FormatAndFolder,
        metavar=("FORMAT", "OUT_DIR"),
        help="write the model as FORMAT into the folder OUT_DIR: "
        + "; ".join(f"{kind}: {what}" for kind, what in FORMATS.items()),
    )
    where.add_argument(
        "--ct2",
        action=_CT2Folder,
        metavar="OUT_DIR",
        help="the CTranslate2 model folder to write (--format ct2 OUT_DIR)",
    )
    p.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="CTranslate2 only: store the weights quantized (default float32; CTranslate2 can also quantize "
        "when loading, with compute_type)",
    )
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    checkpoint_option(p)
    p.set_defaults(func=run, format=None, out_dir=None)


def run(args):
    if args.format == "huggingface":
        from attnmt.translation.marian_export import export_huggingface

        if args.quantization is not None:
            raise AttnmtError(
                f"--quantization {args.quantization} is for CTranslate2 (--format ct2); a Hugging Face export "
                "keeps float32 weights (transformers converts them when loading: from_pretrained(..., dtype=...))"
            )
        out = export_huggingface(args.model_dir, args.out_dir, force=args.force, checkpoint=args.checkpoint, log=log)
        log(f"Hugging Face model in {out} (MarianMTModel.from_pretrained, MarianTokenizer.from_pretrained)")
        return
    from attnmt.translation.export import export_ct2

    out = export_ct2(
        args.model_dir, args.out_dir, quantization=args.quantization, force=args.force, checkpoint=args.checkpoint
    )
    log(f"CTranslate2 model in {out}")
