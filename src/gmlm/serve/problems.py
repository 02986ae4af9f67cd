"""The service's answers other than 200: :class:`Problem` (raised by the routes and the body
limit) and the handlers that turn FastAPI's errors into ``{"detail": "..."}`` naming the
problem."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class Problem(HTTPException):
    """An answer other than 200, with a message that names the problem. An HTTPException, so
    that FastAPI passes it on untouched while it reads the body (BodyLimit raises it there)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(status, detail, headers)


async def problem(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, StarletteHTTPException)
    detail = err.detail
    cause = err.__cause__
    if isinstance(cause, UnicodeDecodeError):  # FastAPI's "error parsing the body"
        detail = f"the body is not UTF-8 JSON ({cause.reason} at byte {cause.start})"
    return JSONResponse({"detail": printable(detail)}, err.status_code, headers=err.headers)


async def invalid(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
    return JSONResponse({"detail": printable("; ".join(parts) or "invalid request")}, 422)


def add_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, problem)
    app.add_exception_handler(RequestValidationError, invalid)


def printable(detail: Any) -> Any:
    """A message that echoes what a client sent, made encodable: a lone surrogate (valid in
    JSON's escapes, not in UTF-8) becomes its backslash escape instead of failing the answer."""
    if isinstance(detail, str):
        return detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return detail
