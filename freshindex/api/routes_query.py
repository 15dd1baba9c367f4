"""The query routes: ``POST /v1/query`` (a question -> a cited context packet) and ``POST /v1/citations/check``.

Both need the query API's credential (the app's ``authorize`` dependency); a
query's ``principal`` and ``groups`` only narrow the credential's identity
(:func:`api.auth.narrow`). A citations check reads its body capped by hand
(``api.max_check_bytes``: 413) and checks it in the threadpool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from freshindex.api import routes_webhooks, schema
from freshindex.api.auth import Authenticator, AuthError, Identity, narrow
from freshindex.api.services import ApiServices


class QueryRequest(BaseModel):
    question: str = Field(min_length=1, max_length=4000)
    kb: str | None = None
    # Narrow the credential's identity, never widen it (api.auth.narrow): the groups are intersected with
    # the credential's, and a principal other than the credential's is a 403.
    principal: str | None = None
    groups: list[str] = Field(default_factory=list)
    limit: int = Field(default=5, ge=1, le=50)

    @field_validator("question", "kb", "principal", "groups")
    @classmethod
    def _unicode(cls, value: Any) -> Any:
        # JSON lets a body escape a lone surrogate ("\\ud800"); such a string cannot be encoded, logged or
        # answered. Pydantic refuses it in some fields only: refuse it in every one (the handler's 400).
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise PydanticCustomError("string_unicode", "not valid Unicode text") from None
        return value


def router(services: ApiServices, authorize: Callable[..., Identity], authenticator: Authenticator,
           require_kb: Callable[[str, str], str]) -> APIRouter:
    """The query routes; ``authorize`` is the app's credential check, ``require_kb`` its knowledge-base check."""
    api = APIRouter()
    settings = services.settings

    @api.post("/v1/query", response_model=None, responses={
        **schema.ok(schema.ContextPacketBody, "The context packet (or an insufficient-evidence one)."),
        **schema.errors(400, 401, 403, 404, 413, 422, 429, 503)})
    def query(req: QueryRequest, identity: Identity = Depends(authorize)) -> dict[str, Any]:
        # (a default, not Annotated[...]: the annotation is a string and `authorize` is local to create_app)
        try:
            principal = narrow(identity, req.principal, req.groups)
        except AuthError as exc:
            raise authenticator.refuse(exc) from None
        kb = require_kb(req.kb or settings.default_kb, "query")
        packet = services.client.retrieve(req.question, kb=kb, principal=principal, limit=req.limit)
        return packet.as_dict()  # its metrics: services.ServiceObserver, on every path

    @api.post("/v1/citations/check", response_model=None, responses={
        **schema.ok(schema.CitationReportBody, "The citation report."), **schema.errors(400, 401, 413, 429, 503)},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": schema.CitationCheckRequest.model_json_schema()}}}})  # read capped by hand, not by FastAPI
    async def citations_check(request: Request, _identity: Identity = Depends(authorize)) -> JSONResponse:
        # The body is read capped before it is parsed: FastAPI's own body model would read it whole first.
        limit = settings.api.max_check_bytes
        body = await routes_webhooks.read_capped(request, limit)
        if body is None:
            return JSONResponse(status_code=413, content={"error": "too_large", "detail": f"body over {limit} bytes"})
        # Parsing and checking are CPU work on up to max_check_bytes: off the event loop, in the threadpool.
        return await run_in_threadpool(_check_body, body)

    def _check_body(body: bytes) -> JSONResponse:
        from freshindex.injection.citations import check_answer

        try:
            data = json.loads(body)
        except RecursionError:  # nested deeper than the parser's recursion limit: not a packet either
            return JSONResponse(status_code=400, content={"error": "bad_json", "detail": "nested too deeply"})
        except (ValueError, UnicodeDecodeError) as exc:
            return JSONResponse(status_code=400, content={"error": "bad_json", "detail": str(exc)[:200]})
        if not isinstance(data, dict):
            return JSONResponse(status_code=400, content={"error": "CitationInputError",
                                                          "detail": 'the body is {"answer": ..., "packet": ...}'})
        # CitationInputError (a FreshIndexError) answers 400 through the app's handler; nothing is counted then.
        report = check_answer(data.get("answer"), data.get("packet"), on_report=services.metrics.count_citations)
        return JSONResponse(status_code=200, content=report.as_dict())

    return api


__all__ = ["QueryRequest", "router"]
