"""attnmt export: a Transformer to CTranslate2."""

from __future__ import annotations

from attnmt.cli.options import checkpoint_option
from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser("export", help="export a Transformer to CTranslate2 (pip install 'attnmt[ct2]')")
    p.add_argument("model_dir", help="folder of a trained Transformer model")
    p.add_argument("--ct2", required=True, metavar="OUT_DIR", help="the CTranslate2 model folder to write")
    p.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="store the weights quantized (default float32; CTranslate2 can also quantize "
        "when loading, with compute_type)",
    )
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    checkpoint_option(p)
    p.set_defaults(func=run)


def run(args):
    from attnmt.translation.export import export_ct2

    out = export_ct2(
        args.model_dir, args.ct2, quantization=args.quantization, force=args.force, checkpoint=args.checkpoint
    )
    log(f"CTranslate2 model in {out}")
