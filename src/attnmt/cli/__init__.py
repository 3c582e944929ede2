"""The ``attnmt`` command line: prepare, train, translate, evaluate, quickstart, plot, serve, info, ...

One module per command or small group of commands, each with ``add_parser(subparsers)`` (its
options; ``set_defaults(func=...)`` names the function that runs it) and its ``run`` function(s);
options.py holds what several share (argument types, option groups), streams.py and models.py
the reading, writing and model loading they share. This module only composes them."""

from __future__ import annotations

import argparse
import gc
import sys

from attnmt.cli import (
    align,
    classify,
    compare,
    evaluate,
    export,
    hub,
    plots,
    quickstart,
    score,
    serve,
    shortlist,
    train,
    translate,
)
from attnmt.cli.options import MAX_TOKENS, window_argument
from attnmt.cli.streams import log
from attnmt.core.errors import AttnmtError

__all__ = ["MAX_TOKENS", "build_parser", "command_line", "main", "window_argument"]

# the command modules, in the order of the commands in `attnmt --help`
COMMANDS = (
    train,
    translate,
    evaluate,
    score,
    shortlist,
    classify,
    export,
    hub,
    quickstart,
    align,
    compare,
    serve,
    plots,
)


def build_parser() -> argparse.ArgumentParser:
    from attnmt import __version__

    parser = argparse.ArgumentParser(prog="attnmt", description="Neural machine translation with attention.")
    parser.add_argument("--version", action="version", version=f"attnmt {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from attnmt.core import threads

        threads.choose(getattr(args, "threads", None), log)  # --threads, or a fair share of the machine
        args.func(args)
    except AttnmtError as e:
        print(f"attnmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnmt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `attnmt translate ... | head`
        return 0
    return 0


def command_line() -> int:
    """The ``attnmt`` program (and ``python -m attnmt.cli``): ``main``, then the interpreter's exit
    without its last garbage collection. That pass walks every object of torch's modules and took
    0.25 of the 0.36 s an exit takes after ``import torch`` here, a tenth of a short translate
    command; the operating system frees the memory anyway, and attnmt's files are closed by then.
    (Only for a whole process: tests call ``main``.)"""
    code = main()
    gc.freeze()
    return code
