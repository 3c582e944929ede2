"""attnmt prepare (the subword models and the store of an experiment), attnmt train and attnmt average (of
kept checkpoints)."""

from __future__ import annotations

import argparse
import os

from attnmt.cli.options import _positive, threads_option
from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser(
        "prepare", help="train the subword model(s) of an experiment, encode its training corpora into its store"
    )
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--force", action="store_true", help="retrain subwords and encode again even if present")
    workers_option(p)
    p.set_defaults(func=run_prepare)

    p = subparsers.add_parser("train", help="train a model (prepares subwords first if needed)")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--resume", action="store_true", help="continue from last.safetensors")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--device", choices=["cpu", "cuda"], help="where to train (default: training.device of the config, cpu)"
    )
    threads_option(p)
    workers_option(p)
    p.set_defaults(func=run_train)

    p = subparsers.add_parser(
        "average",
        help="average the weights of the checkpoints that training kept "
        "(training.keep_checkpoints) into MODEL_DIR/averaged.safetensors",
    )
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--last", type=_at_least_two, help="the last N kept checkpoints (default: all that were kept)")
    p.set_defaults(func=run_average)


def workers_option(p):
    p.add_argument(
        "--workers",
        type=_positive,
        help="processes that encode the training corpora into the prepared store (default: data.workers, 1)",
    )


def _with_workers(config, args):
    if args.workers and hasattr(config.data, "workers"):  # (the corpora of translation: attnmt.data.store)
        config.data.workers = args.workers
    return config


def run_prepare(args):
    from attnmt.core.config import load_config
    from attnmt.core.task import task_of

    config = _with_workers(load_config(args.config), args)
    task_of(config.task).prepare(config, log, args.force)
    log(f"prepared {config.experiment_dir}")


def run_train(args):
    from attnmt.core.config import load_config
    from attnmt.training import train

    config = _with_workers(load_config(args.config), args)
    if args.device:
        config.training.device = args.device
        config.token_batches_on_gpus()  # the GPU's default batches, unless the config sets them
    if args.threads:
        config.training.threads = args.threads
    state = train(config, resume=args.resume, log=log, progress=not args.no_progress)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one process reports
        log(
            f"finished at step {state.step} ({state.seconds / 60:.1f} min of training); "
            f"model in {config.experiment_dir}"
        )


def _at_least_two(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"an average takes two or more checkpoints, got {text!r}")
    return int(text)


def run_average(args):
    from pathlib import Path

    from attnmt.core.folders import average_checkpoints, model_config

    folder = Path(args.model_dir)
    model_config(folder)  # a model folder, or an error saying what it is
    averaged, steps = average_checkpoints(folder, args.last)
    log(
        f"averaged the weights of {len(steps)} checkpoints (steps {', '.join(map(str, steps))}) into {averaged}; "
        "read them with --checkpoint averaged"
    )
