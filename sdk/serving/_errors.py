"""Typed errors and the 4xx answers both apps give them, each with a ``detail`` message."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from sdk.wire import AuthError, PayloadError

__all__ = ["ERROR_RESPONSES", "ConflictError", "NotFoundError", "docs_ui", "install_errors",
           "send_error"]


def docs_ui(enabled: bool) -> dict[str, Any]:
    """FastAPI's interactive docs pages (``/docs``, ``/redoc``): off unless ``enabled``, since
    they load JavaScript from a CDN; ``/openapi.json`` is always served."""
    return {} if enabled else {"docs_url": None, "redoc_url": None}


class NotFoundError(LookupError):
    """An unknown round, stage, version or query (HTTP 404)."""


class ConflictError(ValueError):
    """A write contradicts what is already stored (HTTP 409)."""


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/json": {"schema": {
        "type": "object", "properties": {"detail": {"type": "string"}},
        "required": ["detail"]}}}}
    for code, text in [(401, "Not authenticated"), (403, "Forbidden"), (404, "Not found"),
                       (409, "Conflict"), (413, "Request too large"), (422, "Invalid request")]
}
"""The error responses every endpoint documents in OpenAPI (4xx/5xx bodies are ``ErrorBody``)."""


def _error(status: int) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)
    return handler


async def _auth_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status if isinstance(exc, AuthError) else 401
    return JSONResponse({"detail": str(exc)}, status_code=status)


async def send_error(send: Send, status: int, detail: str, *,
                     retry_after_s: int | None = None) -> None:
    """Answer ``status`` with a JSON ``detail`` (and ``Retry-After`` when given) from ASGI
    middleware, before any route: the one raw error writer. The connection is closed, since
    the request's body was never read."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg', '')}"
             for e in errors[:5]]
    return JSONResponse({"detail": "invalid request: " + "; ".join(parts)}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code,
                        headers=exc.headers)


def install_errors(app: FastAPI) -> None:
    """Map typed errors to 4xx answers with a ``detail`` message (``RateLimited``'s 429:
    ``install_limits``)."""
    app.add_exception_handler(AuthError, _auth_error)
    app.add_exception_handler(PermissionError, _error(403))
    app.add_exception_handler(NotFoundError, _error(404))
    app.add_exception_handler(ConflictError, _error(409))
    app.add_exception_handler(PayloadError, _error(422))
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)

