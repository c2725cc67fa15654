"""Bounded connections: a cap on how many are open, and a deadline for one with no request in progress.

aiohttp closes an idle keep-alive connection after its `keepalive_timeout`, but (before 3.14.5) not one that
never completes its first request's headers: a slowloris client, or a socket opened and left, holds a file
descriptor for ever, and a few hundred of them starve normal requests of descriptors. The guard is the
listening socket's protocol factory: beyond `max_connections` a new connection is answered 503 and closed
before aiohttp sees it, and a watchdog closes any connection that has gone `idle_timeout` seconds without a
request being handled (idle, headers half sent, or a body never started).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

_BODY = json.dumps({"error": {"message": "too many open connections; retry shortly", "type": "server_error",
                              "param": None, "code": 503}}).encode()
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(_BODY)) + _BODY


class _Refuse(asyncio.Protocol):
    """Answers, half-closes, and drains what the client sends until it hangs up (closing with its request
    unread would reset the connection and lose the answer), for at most two seconds."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(REFUSAL)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(2.0, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False


class ConnectionGuard:
    """The protocol factory for `loop.create_server`; the middleware calls `busy`/`free` around each request."""

    def __init__(self, server: web.Server, max_connections: int, idle_timeout: float) -> None:
        self.server = server
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.refused = 0
        self.timed_out = 0
        self._idle_since: dict[RequestHandler, float | None] = {}
        self._watchdog: asyncio.Task | None = None

    def __call__(self) -> asyncio.Protocol:
        if len(self.server.connections) >= self.max_connections:
            self.refused += 1
            return _Refuse()
        handler = self.server()
        self._idle_since[handler] = asyncio.get_running_loop().time()
        return handler

    def busy(self, protocol: object) -> None:
        if protocol in self._idle_since:
            self._idle_since[protocol] = None

    def free(self, protocol: object) -> None:
        if protocol in self._idle_since:
            self._idle_since[protocol] = asyncio.get_running_loop().time()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.idle_timeout / 4))
            now = loop.time()
            live = set(self.server.connections)
            for handler, since in list(self._idle_since.items()):
                if since is not None and handler not in live and now - since > 1.0:
                    del self._idle_since[handler]  # gone by itself (a new one is live within a loop turn)
                elif since is not None and now - since > self.idle_timeout:
                    self.timed_out += 1
                    del self._idle_since[handler]
                    handler.force_close()

    def start(self) -> None:
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    def stop(self) -> None:
        if self._watchdog:
            self._watchdog.cancel()


async def listen(runner: web.AppRunner, host: str, port: int, max_connections: int,
                 idle_timeout: float) -> tuple[asyncio.AbstractServer, ConnectionGuard]:
    """Open the listening socket for a set-up runner, guarded; the caller closes the server it returns."""
    guard = ConnectionGuard(runner.server, max_connections, idle_timeout)
    listener = await asyncio.get_running_loop().create_server(guard, host, port, reuse_address=True)
    guard.start()
    return listener, guard
