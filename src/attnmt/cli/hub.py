"""attnmt import: a Marian model (OPUS-MT, any Hugging Face MarianMTModel) as an attnmt model folder."""

from __future__ import annotations

from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser(
        "import",
        help="a Marian model (OPUS-MT) as an attnmt model folder: from a folder that transformers' "
        "save_pretrained wrote, or a hub name (pip install 'attnmt[hub]'; docs/hub.md)",
    )
    p.add_argument(
        "source",
        help="a folder holding a MarianMTModel and its MarianTokenizer (config.json, model.safetensors, "
        "source.spm, target.spm, vocab.json), or a hub name such as Helsinki-NLP/opus-mt-de-en",
    )
    p.add_argument("out_dir", help="the attnmt model folder to write")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    p.set_defaults(func=run)


def run(args):
    from attnmt.translation.marian import import_marian

    out = import_marian(args.source, args.out_dir, force=args.force, log=log)
    log(f"attnmt model in {out} (attnmt translate {out}, attnmt serve {out}, attnmt info {out})")
