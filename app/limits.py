"""Refuse what no route can read before it is buffered: bodies over the configured limit
(413), bodies declared as something other than JSON (415) and URLs holding a NUL (422).

Plain ASGI middlewares (not BaseHTTPMiddleware, which costs a task per request on the
hot path). The size check reads Content-Length up front and counts a body that declares
none (chunked) as it arrives.
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = -1
        chunked = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse(send, declared)
                    return
            elif name == b"transfer-encoding":
                chunked = True
        if declared >= 0 and not chunked:
            # The server frames a body by its declared length (RFC 9112, section 6.3),
            # so no more than that can arrive: nothing to count. A chunked body, whose
            # Transfer-Encoding overrides any Content-Length, is counted as it comes.
            await self.app(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._refuse(send, received)

    async def _refuse(self, send: Send, size: int) -> None:
        detail = f"request body of {size} bytes exceeds the limit of {self.max_bytes}"
        await _send_error(send, 413, "body_too_large", detail)


class RequestGuardMiddleware:
    """422 for a URL with a NUL character; 415 for a body declared as anything but JSON.

    Every body the API reads is JSON; a form, text or XML body used to be parsed as
    JSON anyway. A body without a content type is still read as JSON, as simple
    clients send it. A NUL character (`%00`) in a path or query parameter reached the
    database and came back as an outage; no id or name may hold one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            url = bytes(scope.get("raw_path") or b"") + b"?" + scope.get("query_string", b"")
            if b"%00" in url or b"\x00" in url:
                detail = "the URL holds a NUL character (%00), which no id or name may contain"
                await _send_error(send, 422, "invalid_request", detail, path="url")
                return
            if scope.get("method") in {"POST", "PUT", "PATCH"}:
                for name, value in scope.get("headers", ()):
                    if name == b"content-type" and not _is_json(value):
                        shown = value.decode("latin-1")[:100]
                        detail = f"request bodies are JSON (application/json), not {shown!r}"
                        await _send_error(send, 415, "unsupported_media_type", detail)
                        return
        await self.app(scope, receive, send)


class ApiTokenMiddleware:
    """With `ARBITER_API_TOKENS`, /v1 asks each request for its caller's bearer token.

    401 without a token, 403 with one nobody holds; otherwise the caller's name goes to
    the request's state (`request.state.caller`), and the services log it with what
    the request sent. Without tokens it is not installed at all.
    """

    def __init__(self, app: ASGIApp, tokens: dict[str, str]) -> None:
        self.app = app
        self.callers = {token.encode(): caller for caller, token in tokens.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            detail = "this service asks /v1 callers for `Authorization: Bearer <token>`"
            await _send_error(send, 401, "unauthorized", detail, challenge=True)
            return
        caller = self.callers.get(token.strip())
        if caller is None:
            await _send_error(send, 403, "forbidden", "no caller holds this token")
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


async def _send_error(
    send: Send,
    status: int,
    code: str,
    detail: str,
    path: str | None = None,
    *,
    challenge: bool = False,
) -> None:
    problems = [] if path is None else [{"path": path, "message": detail}]
    body = orjson.dumps({"error": code, "detail": detail, "problems": problems})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if challenge:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(Exception):
    pass
