"""The request body limit, checked before anything reads the body."""

from fastapi.responses import JSONResponse


class BodyLimitMiddleware:
    """413 for a request body over ``max_bytes``: by its Content-Length, and by the bytes actually
    received (a chunked body has no Content-Length, and a client may lie). The body is read here
    and replayed to the application."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = JSONResponse(status_code=413, content={
            "detail": f"request body too large: the limit is {self.max_bytes} bytes"})
        for key, value in scope["headers"]:
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await JSONResponse(status_code=400, content={"detail": "invalid Content-Length header"})(
                        scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await too_large(scope, receive, send)
                    return
        chunks, size = [], 0
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
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
