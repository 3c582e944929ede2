"""What is checked before anything reads a request: its Host header, the time it arrived, its body
size and how long it takes to arrive; and what becomes of an exception nothing else handled (a 500
with the JSON error body)."""

import ipaddress
import logging
import time

import anyio
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

from attnmt.core.errors import AttnmtError

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
LOG = logging.getLogger("attnmt.serve")


class InternalErrors:
    """A 500 with the JSON error body of every other error (``{"detail": "..."}``) for an exception
    that nothing else handled (a bug, a GPU out of memory, ...), instead of Starlette's plain-text
    "Internal Server Error"; its traceback goes to the server's log (logger "attnmt.serve", with the
    request's method and path), not to the client, which learns only the exception's class. An
    exception after the answer has begun cannot change it: the server's own handler (which closes
    the connection) gets it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:
            if started:
                raise
            LOG.exception("internal error answering %s %s", scope.get("method", ""), scope.get("path", ""))
            await JSONResponse(
                status_code=500,
                content={
                    "detail": f"internal server error ({type(error).__name__}): the request could not be answered; "
                    "the server's log has the details"
                },
            )(scope, receive, send)


class TrustedHostMiddleware:
    """400 for a request whose Host header is not one the server answers to: the ``hosts`` alone or
    with the server's port, or a host given with its port exactly. A web page whose domain name
    rebinds to this machine (DNS rebinding) reaches the server, but its requests carry its own
    domain name as Host. (Starlette's TrustedHostMiddleware ignores the port and cannot read an
    IPv6 Host such as [::1]:8000.)"""

    def __init__(self, app, hosts: list[str]):
        self.app = app
        self.hosts = frozenset(host_name(h) for h in hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and not self.trusted(scope):
            host = Headers(scope=scope).get("host", "")
            await JSONResponse(
                status_code=400,
                content={
                    "detail": f"the Host header {host[:100]!r} is not one this server answers to; allowed: "
                    f"{', '.join(sorted(self.hosts))}, alone or with the server's port (attnmt serve "
                    "--allowed-host NAME adds one)"
                },
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def trusted(self, scope) -> bool:
        host = Headers(scope=scope).get("host", "").lower()
        name, colon, port = host.rpartition(":") if not host.endswith("]") else ("", "", "")
        server = scope.get("server")
        return host in self.hosts or (
            bool(colon) and name in self.hosts and server is not None and port == str(server[1])
        )


def host_name(host: str) -> str:
    """``host`` as a Host header writes it: lower case, an IPv6 address in brackets; AttnmtError for
    what cannot be a host name (with an optional port)."""
    host = host.strip().lower()
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    if not host or any(c.isspace() or c in "/\\@?#,*" for c in host):
        raise AttnmtError(
            f"allowed host {host!r} is not a host name (such as translate.example.org, "
            "10.0.0.5 or [::1], optionally with :PORT)"
        )
    return host


class ArrivalTime:
    """Notes when a request arrived (``request.state.arrived``, time.monotonic()): its time limit
    counts from there, so that time spent waiting for a busy event loop counts too."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            scope.setdefault("state", {})["arrived"] = time.monotonic()
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a request body over ``max_bytes``: by its Content-Length, and by the bytes actually
    received (a chunked body has no Content-Length, and a client may lie); 408 for a body that has
    not all arrived ``timeout`` seconds after the request did (a client that declares 100 bytes and
    sends 22 was never answered, and held its connection and what it had sent for ever). The body
    is read here and replayed to the application."""

    def __init__(self, app, max_bytes: int, timeout: float):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = JSONResponse(
            status_code=413, content={"detail": f"request body too large: the limit is {self.max_bytes} bytes"}
        )
        declared = None
        for key, value in scope["headers"]:
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await JSONResponse(status_code=400, content={"detail": "invalid Content-Length header"})(
                        scope, receive, send
                    )
                    return
                if declared > self.max_bytes:
                    await too_large(scope, receive, send)
                    return
        chunks, size = [], 0
        arrived = scope.get("state", {}).get("arrived", time.monotonic())
        try:
            with anyio.fail_after(max(0.0, arrived + self.timeout - time.monotonic())):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body = message.get("body", b"")
                    size += len(body)
                    if size > self.max_bytes:
                        await too_large(scope, receive, send)
                        return
                    chunks.append(body)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            of = f" of {declared}" if declared is not None else ""
            await JSONResponse(
                status_code=408,
                content={
                    "detail": f"the request body did not arrive within the time limit of {self.timeout:g} s "
                    f"({size}{of} bytes received): send the whole body at once"
                },
                headers={"Connection": "close"},  # (the rest of the body may still come: the connection ends)
            )(scope, receive, send)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
