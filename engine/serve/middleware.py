"""The middleware every request passes: the API key, and any error as an OpenAI-style body."""

from __future__ import annotations

import asyncio
import hmac
import logging

from aiohttp import web

from engine.serve.protocol import APIError

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 2**20
STATE = web.AppKey("state", dict)
OPEN_PATHS = ("/health",)  # what a key never guards
PUBLIC_METRICS_PATHS = ("/metrics", "/version")  # open too with --public-metrics


def error_response(err: APIError, headers: dict | None = None) -> web.Response:
    return web.json_response(err.body(), status=err.status, headers=headers)


def _authorized(request: web.Request, key: str) -> bool:
    given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {key}".encode())


@web.middleware
async def errors_and_auth(request: web.Request, handler):
    """The key guards everything that can change or reveal state (/health stays open); any error becomes an
    OpenAI-style body, an unexpected one a 500 logged once."""
    state = request.app[STATE]
    guard = state.get("guard")
    if guard:
        guard.busy(request.protocol)
    try:
        return await _answer(request, handler, state)
    finally:
        if guard:
            guard.free(request.protocol)


async def _answer(request: web.Request, handler, state: dict) -> web.StreamResponse:
    try:
        key = state["api_key"]
        public = OPEN_PATHS + (PUBLIC_METRICS_PATHS if state["public_metrics"] else ())
        if key and request.path not in public and not _authorized(request, key):
            raise APIError(401, "invalid or missing API key (send 'Authorization: Bearer <key>')")
        return await handler(request)
    except APIError as err:
        return error_response(err, {"Retry-After": "1"} if err.status == 503 else None)
    except web.HTTPRequestEntityTooLarge:
        return error_response(APIError(413, f"request body larger than {MAX_BODY_BYTES} bytes"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(APIError(exc.status, exc.reason or "error"))
    except asyncio.CancelledError:
        raise
    except Exception as err:
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return error_response(APIError(500, f"internal error: {type(err).__name__}", type_="server_error"))


