"""How the app answers what a route raised: 413, 429, 400/422 for a bad body, 401/403, and the error tree.

A body over its cap is 413, a rate limit 429 with ``Retry-After``; a body
that does not validate is 422, or 400 when its text is not valid Unicode (a
lone surrogate escape); an :class:`api.auth.AuthError` its own status; a
:class:`core.errors.FreshIndexError` 404 (not found), 503 (retryable) or 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from freshindex.api.auth import AuthError
from freshindex.api.limits import BodyTooLarge, RateLimited, too_large_body
from freshindex.api.services import ApiServices
from freshindex.core.errors import FreshIndexError, NotFoundError, RetryableError


def install(app: FastAPI, services: ApiServices) -> None:
    """Add the handlers to ``app``; ``services.metrics`` is reached only when a rate limit answers."""

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_request: Any, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content=too_large_body(exc.limit))

    @app.exception_handler(RateLimited)
    async def _rate_limited(_request: Any, exc: RateLimited) -> JSONResponse:
        services.metrics.api_limited.labels(exc.reason).inc()
        return JSONResponse(status_code=429, headers={"Retry-After": str(exc.retry_after)},
                            content={"error": "rate_limited", "detail": f"retry after {exc.retry_after} s"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Any, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        unicode = [e for e in errors if e.get("type") == "string_unicode"]
        if unicode:
            where = ".".join(str(p) for p in unicode[0].get("loc", ()))
            return JSONResponse(status_code=400, content={
                "error": "bad_unicode",
                "detail": f"{where}: not valid Unicode text (a lone surrogate escape such as \\ud800)"})
        # The errors echo the input: make every string encodable (a lone surrogate would make this a 500).
        return JSONResponse(status_code=422, content={"detail": _encodable(jsonable_encoder(
            errors, custom_encoder={bytes: lambda b: b.decode("utf-8", "backslashreplace")}))})

    @app.exception_handler(AuthError)
    async def _refused(_request: Any, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": exc.www_authenticate} if exc.status == 401 else None
        error = {401: "unauthorized", 403: "forbidden"}.get(exc.status, "unavailable")
        return JSONResponse(status_code=exc.status, content={"error": error, "detail": exc.detail}, headers=headers)

    @app.exception_handler(FreshIndexError)
    async def _errors(_request: Any, exc: FreshIndexError) -> JSONResponse:
        status = 404 if isinstance(exc, NotFoundError) else 503 if isinstance(exc, RetryableError) else 400
        return JSONResponse(status_code=status, content={"error": type(exc).__name__, "detail": str(exc)})


def _encodable(value: Any) -> Any:
    """``value`` with every string UTF-8 encodable: a lone surrogate becomes its ``\\udXXX`` escape text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    return value


__all__ = ["install"]
