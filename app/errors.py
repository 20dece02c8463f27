"""One error shape for every failure, and the handlers that produce it.

Every error body is `{"error": CODE, "detail": TEXT, "problems": [{"path", "message"}]}`.
Expected faults raise :class:`ApiError` subclasses; anything unexpected is
still answered in that shape (500), never as an HTML page or a bare string.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError as JsonSchemaError
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.partial_snapshot import cross_field_problems
from policies.model import Frozen, Problem

log = logging.getLogger(__name__)


class ProblemOut(BaseModel):
    path: str = Field(description="JSON path of the offending value in the request body.")
    message: str


class ErrorOut(BaseModel):
    error: str = Field(description="Stable machine-readable code.", examples=["invalid_snapshot"])
    detail: str = Field(description="What went wrong, for a person.")
    problems: list[ProblemOut] = Field(
        default_factory=list, description="Validation problems, one per offending value."
    )


class ApiError(Exception):
    status: int = 500
    code: str = "internal_error"

    def __init__(self, detail: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.problems = list(problems)


class InvalidRequestError(ApiError):
    status = 422
    code = "invalid_request"


class InvalidSnapshotError(ApiError):
    status = 422
    code = "invalid_snapshot"


class NotFoundError(ApiError):
    status = 404
    code = "not_found"


class BodyTooLargeError(ApiError):
    status = 413
    code = "body_too_large"


class ConflictError(ApiError):
    status = 409
    code = "conflict"


class TooManyRequestsError(ApiError):
    status = 429
    code = "too_many_requests"


class UnauthorizedError(ApiError):
    status = 401
    code = "unauthorized"


class ForbiddenError(ApiError):
    status = 403
    code = "forbidden"


class PolicyFailedError(ApiError):
    status = 500
    code = "policy_failed"


class UnavailableError(ApiError):
    status = 503
    code = "unavailable"


def error_response(
    status: int,
    code: str,
    detail: str,
    problems: Iterable[Problem] = (),
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = {
        "error": code,
        "detail": detail,
        "problems": [{"path": p.path, "message": p.message} for p in problems],
    }
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def json_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """`('snapshot', 'jobs', 3, 'workers')` → `snapshot.jobs[3].workers`."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


_UNION_TAGS = frozenset({"job_finished", "throughput", "inference"})


def problems_from_validation(errors: Iterable[Any], prefix: str = "") -> list[Problem]:
    problems = []
    for e in errors:
        loc = [p for p in e.get("loc", ()) if p != "body"]
        # Discriminated unions (feedback events by `kind`) add the tag to the location;
        # it is not a JSON key.
        loc = [p for p in loc if not (isinstance(p, str) and p in _UNION_TAGS)]
        message = str(e.get("msg", "invalid"))
        kind = e.get("type")
        if kind in ("union_tag_not_found", "union_tag_invalid"):
            # The tag is a field like any other: named at its own path, with its choices
            # (pydantic quotes the field's name in the context, and lists the tags only
            # when one was given).
            ctx = e.get("ctx", {})
            loc = [*loc, str(ctx.get("discriminator", "kind")).strip("'")]
            tags = ", ".join(sorted(_UNION_TAGS))
            found = ctx.get("tag")
            message = (
                f"required: one of {tags}" if found is None else f"{found!r} is not one of {tags}"
            )
        elif kind == "json_invalid":
            message = f"malformed JSON: {e.get('ctx', {}).get('error', message)}"
        problems.append(Problem(path=json_path(loc, prefix), message=message))
    return problems


def invalid_request(problems: Sequence[Problem]) -> InvalidRequestError:
    """A 422 listing `problems`; its detail counts them and names the first."""
    first = problems[0] if problems else None
    detail = f"{len(problems)} problem(s) in the request" + (
        f"; first: {first.path}: {first.message}" if first else ""
    )
    return InvalidRequestError(detail, problems)


def validation_error(error: ValidationError, prefix: str = "") -> InvalidRequestError:
    return invalid_request(problems_from_validation(error.errors(include_url=False), prefix))


_MSGSPEC_PATH = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MSGSPEC_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `(?P<key>[^`]*)`")


def decoder_problem(error: msgspec.ValidationError) -> Problem:
    """The decoder's one problem, at its JSON path.

    msgspec says ``Expected `int` >= 1 - at `$.snapshot.jobs[3].workers```; a missing
    or unknown key is named in the message and located at its object, so the key is
    appended to the path, as the schema listing does.
    """
    match = _MSGSPEC_PATH.match(str(error))
    message = match.group("message") if match else str(error)
    path = ((match.group("path") if match else None) or "").lstrip(".")
    field = _MSGSPEC_FIELD.match(message)
    if field is not None:
        path = f"{path}.{field.group('key')}" if path else field.group("key")
    return Problem(path=path or "body", message=message)


def decode_error(
    error: msgspec.MsgspecError, body: bytes, kind: type[Frozen]
) -> InvalidRequestError:
    """A decoder's refusal of `body` as `kind`, as a 422 that lists *every* problem.

    The decoder stops at the first offending value (its message reads ``Expected `int`
    >= 1 - at `$.snapshot.jobs[3].workers```). Only on this slow path, the body is
    checked again against the JSON schema generated from the same type, the one the
    OpenAPI spec publishes, so the caller hears of every field-level problem at once;
    a check the schema cannot express (a `__post_init__` rule) comes from the decoder.
    The cross-field problems of a snapshot in the body (duplicate ids, GPUs held twice)
    follow, judged on the parts that decode (:mod:`app.partial_snapshot`), so one answer
    lists every problem.
    """
    if not isinstance(error, msgspec.ValidationError):
        problems = [Problem(path="body", message=f"malformed JSON: {error}")]
    else:
        found = decoder_problem(error)
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as malformed:
            # The decoder can refuse a value before it reaches where the JSON breaks off.
            problems = [found, Problem(path="body", message=f"malformed JSON: {malformed}")]
        else:
            problems = schema_problems(document, kind)
            if not any(p.path == found.path for p in problems):
                problems.insert(0, found)
            problems += cross_field_problems(document, kind)
    return invalid_request(problems)


def nul_problems(document: object, at: tuple[str | int, ...] = ()) -> list[Problem]:
    """Every string (or key) of `document` holding a NUL character, which no database
    column or JSON document the log writes can store."""
    found: list[Problem] = []
    if isinstance(document, str):
        if "\x00" in document:
            found.append(Problem(path=json_path(at), message="contains a NUL character"))
    elif isinstance(document, dict):
        for key, value in document.items():
            if "\x00" in key:
                found.append(Problem(path=json_path(at), message="a key contains a NUL character"))
            found += nul_problems(value, (*at, key))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found += nul_problems(value, (*at, i))
    return found


def check_no_nul(body: bytes) -> None:
    """Refuse a JSON body with a NUL character in any string (a 422 naming each)."""
    # JSON can carry NUL only escaped; one scan of the bytes spares the walk otherwise.
    if b"\\u0000" not in body:
        return
    problems = nul_problems(orjson.loads(body)) or [
        Problem(path="body", message="contains a NUL character")
    ]
    raise invalid_request(problems)


def _is_integer(_: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


# JSON Schema counts 1.0 as an integer; the decoder, like most typed clients, does not.
# The listing of problems follows the decoder, which is what accepts or refuses.
_StrictIntegers = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@functools.cache
def _validator(kind: type[Frozen]) -> Draft202012Validator:
    validator: Draft202012Validator = _StrictIntegers(msgspec.json.schema(kind))
    return validator


def schema_problems(document: object, kind: type[Frozen]) -> list[Problem]:
    """Every place where `document` breaks the published JSON schema of `kind`.

    A missing or unknown key is reported at its own path (`snapshot.profile`), not at
    the object that lacks or carries it; a value that may also be null is reported by
    what its non-null form requires.
    """
    return [p for error in _validator(kind).iter_errors(document) for p in _located(error)]


def _located(error: JsonSchemaError) -> list[Problem]:
    at = list(error.absolute_path)
    instance = error.instance
    if error.validator in ("anyOf", "oneOf") and error.context:
        # `X | None` fields: the null branch's complaint says nothing useful.
        branches = [
            e for e in error.context if not (e.validator == "type" and e.validator_value == "null")
        ]
        if branches and instance is not None:
            return [p for e in branches for p in _located(e)]
    required = error.validator_value
    if error.validator == "required" and isinstance(instance, dict) and isinstance(required, list):
        missing = [k for k in required if k not in instance]
        return [Problem(path=json_path([*at, k]), message="required") for k in missing]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = schema.get("properties", {})
        extra = [k for k in instance if k not in known]
        return [Problem(path=json_path([*at, k]), message="unknown field") for k in extra]
    return [Problem(path=json_path(at), message=error.message)]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.detail, exc.problems)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_: Request, exc: RequestValidationError) -> Response:
        problems = problems_from_validation(exc.errors())
        return error_response(422, "invalid_request", "the request does not validate", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot even read as text (invalid UTF-8): a
            # bad body, so a 422 like every other, naming the body.
            problem = Problem(path="body", message=f"malformed JSON: {exc.detail}")
            return error_response(422, "invalid_request", str(exc.detail), [problem])
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        # The router's own headers travel on: a 405 names the methods the path allows
        # (`Allow`, which RFC 9110 requires of every 405).
        return error_response(
            exc.status_code,
            codes.get(exc.status_code, "http_error"),
            str(exc.detail),
            headers=exc.headers,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(500, "internal_error", f"unexpected {type(exc).__name__}")


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting the error shape for `statuses`."""
    text = {
        401: "Missing or malformed bearer token.",
        403: "Wrong token, or admin endpoints disabled.",
        404: "Unknown profile, policy or resource.",
        413: "Request body over the configured limit.",
        415: "The body is declared as something other than JSON.",
        409: "A retraining of this policy and profile is already queued or running.",
        429: "Too many retrainings are queued; retry once some have finished.",
        422: "The body does not validate; each problem names its JSON path.",
        500: "A policy failed and the profile has no fallback for it.",
        503: "Nothing can answer right now.",
    }
    return {s: {"model": ErrorOut, "description": text[s]} for s in statuses}
