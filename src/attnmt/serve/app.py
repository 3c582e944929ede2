"""The application: models, routes, Host check, body limit, JSON errors (500s included) and the
explorer page; and serving it."""

import signal
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Optional, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from attnmt.serve.connections import uvicorn_settings
from attnmt.serve.limits import ServerLimits
from attnmt.serve.middleware import (
    LOOPBACK_HOSTS,
    ArrivalTime,
    BodyLimitMiddleware,
    InternalErrors,
    TrustedHostMiddleware,
    host_name,
)
from attnmt.serve.models import ModelEntry, ModelTimeout, load_models
from attnmt.serve.routes import model_routes, router

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
DOCS_ASSETS = "/docs-assets"  # where /docs and /redoc find Swagger UI's and ReDoc's files

PLACEHOLDER_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attnmt</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 2em auto">
<h1>attnmt</h1>
<p>The HTTP API is running. Models: {models}.</p>
<p>Endpoints: <code>GET /health</code>, <code>GET /models</code>, <code>POST /translate</code>,
<code>POST /trace</code>, <code>POST /beam</code>, <code>POST /attention</code>.
Interactive documentation: <a href="docs">/docs</a>.</p>
</body></html>
"""


def create_app(
    models: list[ModelEntry],
    limits: Optional[ServerLimits] = None,
    device: str = "cpu",
    allowed_hosts: Sequence[str] = (),
    checkpoint: str = "best",
    ensembles: Optional[dict[str, list]] = None,
    decoding: Optional[dict] = None,
) -> FastAPI:
    """An application serving ``models``: trained model folders, each named after its folder, or
    pairs (name, folder); the first is the default. Each is loaded with ``attnmt.load(folder,
    checkpoint, device=device)``. Requests must name this machine in their Host header (localhost, 127.0.0.1 or
    [::1]) or one of ``allowed_hosts`` (a proxy's name: see docs/security.md). ``ensembles``: name ->
    the folders of other models that the translation model of that name decodes with (an
    ensemble). ``decoding``: decoding settings (fields of config.decoding: length_penalty,
    coverage_penalty, ...) for every model that decodes, instead of its config's. Raises
    AttnmtError for a bad folder, a bad name or a name used twice, or a bad setting."""
    limits = limits or ServerLimits()
    hosts = [host_name(h) for h in (*LOOPBACK_HOSTS, *allowed_hosts)]  # checked now: middleware is built later
    loaded = load_models(models, limits, device, checkpoint, ensembles)
    for model in loaded.values():
        if decoding and model.inputs != "pairs":
            model.translator.set_decoding(**decoding)

    @asynccontextmanager
    async def lifespan(app):
        yield
        for model in loaded.values():  # after uvicorn has let the requests in flight finish
            if model.batcher is not None:  # (a sentence-pair model has none)
                await model.batcher.stop()

    # FastAPIOffline: FastAPI whose /docs (Swagger UI) and /redoc load their scripts and styles
    # from files in the fastapi-offline package, under /docs-assets, not from a CDN: they work offline.
    app = FastAPIOffline(
        title="attnmt",
        version=_version(),
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
        description="Neural machine translation with attention: translations with their "
        "attention matrices, and every quantity of every decoder step.",
    )
    app.state.models = loaded
    app.state.limits = limits
    speech = any(model.inputs == "audio" for model in loaded.values())
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.body_bytes(audio=speech), timeout=limits.timeout)
    app.add_middleware(ArrivalTime)
    app.add_middleware(TrustedHostMiddleware, hosts=hosts)
    app.add_middleware(InternalErrors)  # the outermost: any exception of the others too is a JSON 500
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(ModelTimeout, _too_slow)
    app.include_router(router)
    app.include_router(model_routes(limits))
    _add_page(app)
    return app


def _add_page(app: FastAPI):
    """The explorer page at / and its files under /static; a placeholder without them."""
    if STATIC_DIR.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        page = STATIC_DIR / "index.html"
        if page.is_file():
            return FileResponse(page, media_type="text/html")
        return HTMLResponse(PLACEHOLDER_HTML.format(models=", ".join(app.state.models)))


# ---------------------------------------------------------------------------------------------
# Errors: JSON objects whose ``detail`` is a readable string.


async def _too_slow(request: Request, exc: ModelTimeout) -> JSONResponse:
    return JSONResponse(status_code=503, content={"detail": str(exc)})


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e), "type": e.get("type", "")} for e in exc.errors()
    ]
    detail = (
        "; ".join(p["msg"] if p["msg"].startswith("the body ") else f"{_where(p['loc'])}: {p['msg']}" for p in problems)
        or "invalid request"
    )
    return JSONResponse(status_code=422, content={"detail": detail, "errors": problems})


def _message(error: dict) -> str:
    kind, loc = error.get("type", ""), tuple(error.get("loc", ()))
    if kind == "json_invalid":
        return f"the body is not valid UTF-8 JSON ({error.get('ctx', {}).get('error', 'decode error')})"
    if loc == ("body",) and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "the body must be a JSON object, sent with Content-Type: application/json"
    return str(error.get("msg", "")).removeprefix("Value error, ")


def _where(loc: list[str]) -> str:
    """'text[2]' for ['body', 'text', 'list', '2']: the field as the client wrote it."""
    parts = loc[1:] if loc and loc[0] in ("body", "query", "path") else loc
    out = ""
    for i, part in enumerate(parts):
        if i == 1 and parts[0] == "text" and part in ("text", "list"):
            continue  # the tag of the text union
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


# ---------------------------------------------------------------------------------------------
# Serving


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("attnmt")
    except Exception:  # noqa: BLE001 - not installed: no version
        return "0"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"):
    """Serves ``app`` with uvicorn (with the settings of attnmt.serve.connections) until SIGTERM or
    SIGINT (Ctrl-C), then shuts down gracefully: uvicorn stops accepting connections, lets the
    requests in flight finish and answer (for at most the request time limit), and returns; the
    process then exits with status 0."""
    import uvicorn

    def exit_cleanly(signum, frame):
        raise SystemExit(0)

    # uvicorn handles the signals while it serves, then raises the signal again once it has shut
    # down, for the handler in place before it: by default death by SIGTERM, or KeyboardInterrupt.
    # The shutdown was clean, so that handler exits with 0 (as it does if the signal comes before
    # uvicorn has started, when there is nothing to finish).
    main_thread = threading.current_thread() is threading.main_thread()  # signals are set there only
    previous = {sig: signal.signal(sig, exit_cleanly) for sig in (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, **uvicorn_settings(app.state.limits))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
