"""What the simulator's HTTP deciders use of an HTTP client.

`httpx.Client` is the default; a test passes the service's own test client, which
Starlette builds on another HTTP stack (httpx2). Both satisfy these protocols, so
the deciders name what they call rather than one library's class. :func:`post_json` and
:func:`decoded` are the posting and reading every HTTP decider and dispatcher does.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, Protocol, TypeVar

from policies.model import decode

T = TypeVar("T")


class HttpResponse(Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    @property
    def content(self) -> bytes: ...

    def json(self) -> Any: ...


class HttpClient(Protocol):
    def get(self, url: str) -> HttpResponse: ...

    def post(
        self,
        url: str,
        *,
        content: bytes | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse: ...

    def close(self) -> None: ...


_JSON_HEADERS = {"content-type": "application/json"}


def post_json(
    client: HttpClient,
    url: str,
    body: bytes,
    failure: type[Exception],
    *,
    accepted: Container[int] = (200,),
) -> HttpResponse:
    """POST `body` (JSON) to `url`; an answer whose status is not `accepted` raises
    `failure` with the URL, the status and the start of what the service said."""
    response = client.post(url, content=body, headers=_JSON_HEADERS)
    if response.status_code not in accepted:
        raise failure(f"POST {url} answered {response.status_code}: {response.text[:500]}")
    return response


def decoded(
    response: HttpResponse, kind: type[T], url: str, what: str, failure: type[Exception]
) -> T:
    """The answer as `kind`, validated; one that is not raises `failure` saying it is not
    `what` (e.g. "a decision")."""
    try:
        return decode(response.content, kind)
    except ValueError as error:
        raise failure(f"POST {url}: not {what}: {error}") from error
