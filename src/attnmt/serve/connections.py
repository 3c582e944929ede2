"""What uvicorn does before the app sees a request: how many connections it holds, how long an idle
one stays open, how large the request line and headers may be, and the answer to a request it
cannot read, which is the API's JSON error body rather than uvicorn's plain text."""

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnmt.serve.limits import ServerLimits

# A connection that has not sent a whole request line and headers this long after it opened or after
# its last answer is closed (uvicorn's default keep-alive)
KEEP_ALIVE_SECONDS = 5
HEADER_BYTES = 16 * 1024  # request line and headers still incomplete beyond this are an invalid request (h11's default)

INVALID_REQUEST = json.dumps(
    {
        "detail": "invalid HTTP request: its request line or a header could not be read (a Content-Length that "
        "is not a number, no Host header or two of them, headers still incomplete after 16 KB, ...)"
    }
).encode()


class JSONErrorsH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, whose 400 for a request that HTTP cannot parse (h11's
    RemoteProtocolError) carries the JSON error body of every other error, ``{"detail": "..."}``,
    instead of the plain text "Invalid HTTP request received." (the app never sees such a request:
    the server answers it and closes the connection), and which closes a connection that has not
    sent a whole request line and headers ``timeout_keep_alive`` seconds after it opened or after
    its last answer. uvicorn arms that timer only after an answer, and any byte received stops it:
    a connection that sent nothing, or a header a byte at a time, was held for ever, and with
    ``limit_concurrency`` enough of them would have kept every other client out."""

    headers_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.await_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.await_headers()  # (the next request's)

    def await_headers(self) -> None:
        if self.headers_timer is not None:
            self.headers_timer.cancel()
        self.headers_timer = self.loop.call_later(self.timeout_keep_alive, self.close_if_no_request)

    def close_if_no_request(self) -> None:
        # h11 leaves IDLE once a request line and its headers are complete
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.timeout_keep_alive_handler()  # uvicorn's own close of an idle connection

    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(INVALID_REQUEST)).encode()),
            (b"connection", b"close"),
        ]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(INVALID_REQUEST)):
            self.transport.write(self.conn.send(event))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()


def uvicorn_settings(limits: ServerLimits) -> dict:
    """uvicorn's settings for a server with these limits (uvicorn.run(app, **settings), or uvicorn.Config):
    at most ``max_connections`` connections answered at once (beyond, uvicorn's own plain-text 503),
    idle connections closed, the header section bounded, JSON 400s, and on shutdown the requests in
    flight given at most the time limit to finish."""
    return {
        "http": JSONErrorsH11Protocol,
        "limit_concurrency": limits.max_connections,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "h11_max_incomplete_event_size": HEADER_BYTES,
        "timeout_graceful_shutdown": limits.timeout,
    }
