"""attnmt serve: the explorer page and the HTTP API. Its limit options (--max-body-bytes, ...,
--timeout, --max-batch-wait, ...) are generated from the fields of ServerLimits
(attnmt.serve.limits), where each limit is written once: its default, type and help."""

from __future__ import annotations

from dataclasses import Field, fields

from attnmt.cli.options import (
    _non_negative_float,
    _port,
    _positive,
    _positive_float,
    checkpoint_option,
    device_option,
    penalty_options,
    threads_option,
)
from attnmt.cli.streams import log


def add_parser(subparsers):
    p = subparsers.add_parser(
        "serve",
        help="the explorer page (at /: translate, heatmaps, step through the decoding, "
        "beam tree, compare models) and the HTTP API (/docs); loopback by default",
        description="Serves the explorer page at http://HOST:PORT/ (type a sentence, see its "
        "attention, step through the decoding, compare models: docs/explorer.md) "
        "and the HTTP API (POST /translate, /trace, /beam, ...; OpenAPI "
        "documentation at /docs: docs/http-api.md).",
    )
    p.add_argument(
        "model_dir",
        nargs="+",
        metavar="[NAME=]DIR",
        help="trained model folder(s), named after the folder or NAME (letters, digits, . - _)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header to answer besides localhost, 127.0.0.1 and [::1] (and --host): the name "
        "clients use behind a proxy; may be repeated",
    )
    p.add_argument(
        "--ensemble",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="the translation model NAME decodes with DIR's model too, of the same language pair and "
        "subwords (repeatable): each step's distribution is the mean of all (ensemble decoding)",
    )
    checkpoint_option(p)
    device_option(p)
    penalty_options(p)
    for limit in limit_fields():
        add_limit_option(p, limit)
        if limit.name == "batch_wait":
            p.add_argument(
                "--no-batching",
                action="store_true",
                help="decode one /translate request at a time (same as --max-batch 1)",
            )
    threads_option(p)
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=run)


def ensembles_of(arguments: list[str]) -> dict[str, list[str]]:
    """--ensemble NAME=DIR, each: NAME -> its DIRs, in order."""
    from attnmt.core.errors import AttnmtError

    ensembles: dict[str, list[str]] = {}
    for argument in arguments:
        name, equals, folder = argument.partition("=")
        if not (equals and name and folder):
            raise AttnmtError(f"--ensemble {argument}: give NAME=DIR (NAME: a served model's name)")
        ensembles.setdefault(name, []).append(folder)
    return ensembles


def limit_fields() -> list[Field]:
    """The fields of ServerLimits that are options of attnmt serve (those with a help text), in their order."""
    from attnmt.serve.limits import ServerLimits  # without FastAPI: cheap to import

    return [f for f in fields(ServerLimits) if f.metadata.get("help") is not None]


def flag_of(limit: Field) -> str:
    return limit.metadata.get("flag") or "--" + limit.name.replace("_", "-")


def dest_of(limit: Field) -> str:
    """Where argparse puts the option's value (``args.max_batch_wait`` for --max-batch-wait)."""
    return flag_of(limit)[2:].replace("-", "_")


def add_limit_option(p, limit: Field):
    """--NAME of a limit: a positive whole number for an int field, a positive number for a float one
    (or at least 0, metadata zero), in the field's unit x metadata scale, its default the field's."""
    meta = limit.metadata
    if limit.type in (int, "int"):
        kind = _positive
    else:
        kind = _non_negative_float if meta.get("zero") else _positive_float
    scale = meta.get("scale", 1)
    p.add_argument(
        flag_of(limit),
        type=kind,
        default=limit.default * scale if scale != 1 else limit.default,
        **({"metavar": meta["metavar"]} if meta.get("metavar") else {}),
        help=meta["help"],
    )


def server_limits(args):
    """ServerLimits from the limit options (and --no-batching: a batch of one)."""
    from attnmt.serve import ServerLimits

    values = {}
    for limit in limit_fields():
        scale = limit.metadata.get("scale", 1)
        value = getattr(args, dest_of(limit))
        values[limit.name] = value / scale if scale != 1 else value
    if args.no_batching:
        values["max_batch"] = 1
    return ServerLimits(**values)


def run(args):
    from attnmt.serve import create_app, is_loopback, run_server, url_of
    from attnmt.serve.models import model_entry

    limits = server_limits(args)
    bound = [] if args.host in ("0.0.0.0", "::", "[::]", "") else [args.host]  # one address: its name is trusted
    app = create_app(
        [model_entry(d) for d in args.model_dir],
        limits,
        device=args.device,
        allowed_hosts=bound + args.allowed_host,
        checkpoint=args.checkpoint,
        ensembles=ensembles_of(args.ensemble),
        decoding={
            name: value
            for name, value in (("length_penalty", args.length_penalty), ("coverage_penalty", args.coverage_penalty))
            if value is not None
        },
    )
    if not is_loopback(args.host):
        log(
            f"warning: listening on {args.host}, reachable from other machines; the server has no "
            "authentication and no TLS: expose it only behind a reverse proxy"
        )
    url = url_of(args.host, args.port)
    print(f"attnmt: serving {', '.join(app.state.models)} at {url} (API documentation: {url}docs)", flush=True)
    run_server(app, host=args.host, port=args.port, log_level=args.log_level)
