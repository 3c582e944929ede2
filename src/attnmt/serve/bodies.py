"""Request bodies read as strict UTF-8 JSON: whatever a client sends, a body that cannot be read is
a 422 with the errors list, like any other invalid request.

FastAPI reads a JSON body with ``json.loads`` and answers 400 "There was an error parsing the body"
(another shape than every other error) to anything but a JSON syntax error: invalid UTF-8, JSON
nested too deeply for Python's recursion limit, an integer of more than 4,300 digits. Here the
body is read by ``StrictJSONRequest.json``, which turns each of these into a JSON syntax error,
which FastAPI reports as a validation error (422, type ``json_invalid``); JSON is UTF-8 (RFC 8259),
so a body declared in another charset is refused rather than misread, and so are NaN and Infinity,
which are not JSON."""

import json
from email.message import Message

from fastapi import Request
from fastapi.routing import APIRoute


class StrictJSONRequest(Request):
    async def json(self):
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body(), self.headers.get("content-type", ""))
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose request body is read by StrictJSONRequest (FastAPI's way to change it)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict_handler(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler


def parse_json(body: bytes, content_type: str):
    """The JSON value of ``body``; json.JSONDecodeError, with a readable message, for anything else."""
    message = Message()
    message["content-type"] = content_type
    charset = message.get_content_charset("utf-8")
    if charset not in ("utf-8", "utf8"):
        raise json.JSONDecodeError(f"JSON is UTF-8, and the body is declared {charset}: send it as UTF-8", "", 0)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise json.JSONDecodeError(f"invalid UTF-8 at byte {e.start}", "", 0) from None
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise json.JSONDecodeError("a number with too many digits", "", 0) from None


def _not_json(constant: str):
    raise json.JSONDecodeError(f"{constant} is not a JSON number", "", 0)
