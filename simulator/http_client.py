"""What the simulator's HTTP deciders use of an HTTP client.

`httpx.Client` is the default; a test passes the service's own test client, which
Starlette builds on another HTTP stack (httpx2). Both satisfy these protocols, so
the deciders name what they call rather than one library's class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


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
