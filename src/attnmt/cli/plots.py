"""attnmt plot (figures of one sentence and of training) and attnmt info (what a model folder holds)."""

from __future__ import annotations

import json

from attnmt.cli.options import _positive, checkpoint_option, device_option
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    add_plot_parser(subparsers)
    add_info_parser(subparsers)


def add_plot_parser(subparsers):
    p = subparsers.add_parser(
        "plot",
        help="draw attention (heatmap, encoder states, decoder steps, GIF animation, "
        "HTML heatmap) or training curves into PNG, SVG, GIF or HTML files",
        description="Figures of one sentence and of training, each written to the file its "
        "option names: PNG or SVG (by the suffix), --gif FILE.gif (the decoding as "
        "an animation), --out FILE.html (the heatmap as a standalone HTML page). "
        "See docs/visualization.md.",
    )
    p.add_argument("model_dir", help="folder of a trained model; for --curves alone also a metrics.jsonl file")
    p.add_argument(
        "sentence",
        nargs="?",
        help="source sentence to translate and draw (speech models: a sound file, drawn with its spectrogram)",
    )
    device_option(p)
    p.add_argument(
        "--out",
        metavar="FILE",
        help="attention heatmap (.png, .svg or .html; default attention.png when no other figure is asked for)",
    )
    p.add_argument(
        "--merge-words",
        action="store_true",
        help="heatmap of words instead of subword pieces (source pieces summed, target averaged)",
    )
    p.add_argument(
        "--beam",
        type=_positive,
        default=None,
        help="beam size of the heatmap's translation (default: config); the other figures are greedy",
    )
    checkpoint_option(p)
    p.add_argument(
        "--saliency",
        metavar="FILE",
        help="a translation model: heatmap of the translation's saliency, how much each source piece's "
        "embedding moves each output piece (gradient x input; .png or .svg), to set beside --out",
    )
    p.add_argument("--states", metavar="FILE", help="encoder states and context vectors (.png or .svg)")
    p.add_argument(
        "--dims", type=int, default=32, help="dimensions drawn by --states: the N that vary most (0 = all; default 32)"
    )
    p.add_argument(
        "--step",
        nargs=2,
        action="append",
        metavar=("K", "FILE"),
        help="decoder step K (counting from 0) in detail (.png or .svg); may be repeated",
    )
    p.add_argument("--top-k", type=_positive, default=5, help="next-token candidates shown by --step")
    p.add_argument("--gif", metavar="FILE", help="animated GIF of the decoding, one frame per step (.gif)")
    p.add_argument("--fps", type=float, default=1.0, help="frames per second of --gif")
    p.add_argument(
        "--curves",
        metavar="FILE",
        help="training curves (loss, perplexity, BLEU) from MODEL_DIR/metrics.jsonl (.png or .svg)",
    )
    transformer_plot_options(p)
    p.add_argument(
        "--tag",
        help="a translation model trained with tags: put this one before the sentence, as "
        "translate --tag does (the figures show it as the first source token)",
    )
    p.add_argument(
        "--hypothesis",
        help="a sentence-pair model: the hypothesis (SENTENCE is the premise); --out draws "
        "attend, compare (--dims) and aggregate",
    )
    p.add_argument(
        "--direction",
        choices=["premise", "hypothesis"],
        default="premise",
        help="a sentence-pair model: the softmax drawn, over the hypothesis for each premise word "
        "(default) or over the premise for each hypothesis word",
    )
    p.set_defaults(func=run_plot)


def transformer_plot_options(p):
    p.add_argument(
        "--head-view",
        metavar="FILE",
        help="Transformer: head view of --layer and --head, lines "
        "from query to key tokens, opacity = weight (.png or .svg)",
    )
    p.add_argument(
        "--grid", metavar="FILE", help="Transformer: every layer x head of --kind as small heatmaps (.png or .svg)"
    )
    p.add_argument(
        "--kind",
        choices=["encoder", "decoder", "cross"],
        default=None,
        help="Transformer: which attention --head-view and --grid draw (default cross)",
    )
    p.add_argument(
        "--layer", type=int, default=None, help="Transformer: layer of --head-view, counting from 0 (default: the last)"
    )
    p.add_argument(
        "--head",
        type=int,
        default=None,
        help="Transformer: head of --head-view, counting from 0 (default: the average of the heads)",
    )


def add_info_parser(subparsers):
    p = subparsers.add_parser(
        "info",
        help="what a trained model folder holds: task, model, parameters, vocabularies, data, training and scores",
    )
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_info)


def run_plot(args):
    """Figures of one sentence (heatmap, encoder states, decoder steps, GIF) and/or training curves:
    the options as a FigureRequest; attnmt.viz.plan chooses, checks and builds the figures."""
    from attnmt.viz.plan import FigureRequest, plan_figures

    steps = []
    for number, path in args.step or []:
        try:
            steps.append((int(number), path))
        except ValueError:
            raise AttnmtError(f"--step {number} {path}: the step must be a whole number (counting from 0)") from None
    request = FigureRequest(
        args.model_dir,
        args.sentence,
        out=args.out,
        merge_words=args.merge_words,
        beam=args.beam,
        checkpoint=args.checkpoint,
        states=args.states,
        dims=args.dims,
        steps=steps,
        top_k=args.top_k,
        gif=args.gif,
        fps=args.fps,
        curves=args.curves,
        head_view=args.head_view,
        grid=args.grid,
        kind=args.kind,
        layer=args.layer,
        head=args.head,
        device=args.device,
        hypothesis=args.hypothesis,
        direction=args.direction,
        tag=args.tag,
        saliency=args.saliency,
    )
    for write in plan_figures(request):
        print(write(), flush=True)


def run_info(args):
    from attnmt.info import format_info, model_info

    info = model_info(args.model_dir)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
