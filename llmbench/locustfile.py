"""Locust transport: `locust -f llmbench/locustfile.py --host URL ...`, or `llmbench run --engine locust`.

Each Locust worker draws its share of llmbench's dataset and send schedule (open loop at `--llm-rate`,
spread over the workers by arrival index; Locust's closed-loop `wait_time` would bunch arrivals), streams
from the OpenAI endpoint, fires TTFT / TPOT / E2E as Locust request events (for the web UI and its CSV),
and writes llmbench's own per-request records, so percentiles come from exact samples rather than
Locust's rounded histogram. With `--llm-rate 0` users run closed loop, one request after another.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import gevent
from locust import User, events, task
from locust.exception import StopUser

from llmbench import arrivals, client, client_stalls, datasets, locust_transport
from llmbench.records import RecordWriter, RequestRecord
from llmbench.results import worker_meta, worker_records, worker_stalls

_state: dict = {}


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    group = parser.add_argument_group("llmbench")
    group.add_argument("--llm-dataset", default="sharegpt", help="llmbench dataset name")
    group.add_argument("--llm-dataset-path", default="", help="dataset file, if any")
    group.add_argument("--llm-dataset-options", default="{}", help="JSON of dataset builder options")
    group.add_argument("--llm-num-prompts", type=int, default=200, help="requests in the whole run")
    group.add_argument("--llm-rate", type=float, default=0.0, help="open-loop req/s over all workers (0: closed)")
    group.add_argument("--llm-burstiness", type=float, default=1.0)
    group.add_argument("--llm-workers", type=int, default=1, help="workers sharing the schedule")
    group.add_argument("--llm-backend", default="openai", choices=list(client.BACKENDS))
    group.add_argument("--llm-model", default="", help="model name (default: first of /v1/models)")
    group.add_argument("--llm-tokenizer", default="", help="local tokenizer folder")
    group.add_argument("--llm-records", default="llmbench-locust", help="folder for per-worker records")
    group.add_argument("--llm-seed", type=int, default=0)
    group.add_argument("--llm-ignore-eos", action="store_true")
    group.add_argument("--llm-request-timeout", type=float, default=600.0, help="seconds a request may take in all")
    group.add_argument("--llm-read-timeout", type=float, default=60.0,
                       help="seconds a begun stream may send nothing (0: no limit)")
    group.add_argument("--llm-duration", type=float, default=0.0,
                       help="closed loop: seconds in which users start requests (0: until the requests run out)")


START_DELAY = 1.0  # seconds between the start signal (all workers ready) and the first send


@events.init.add_listener
def _prepare(environment, **_kwargs) -> None:
    """Tokenizer and dataset are built before the process joins the test: done later, this blocking work
    would starve Locust's heartbeats and the master would drop the worker. The master tells every worker
    one wall-clock start time, so their shares of the schedule line up, and ends the test once every live
    worker reported its share done."""
    from locust.runners import MasterRunner, WorkerRunner

    if environment.parsed_options is None:
        return
    if isinstance(environment.runner, MasterRunner):
        _master_protocol(environment)
        return
    if isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message("llm_start", lambda environment, msg, **kw: _state.update(
            start_wall=msg.data))
    # in a real thread, so the gevent hub keeps answering the master's heartbeats meanwhile
    _state["ready"] = gevent.get_hub().threadpool.spawn(_build, environment.parsed_options, environment.host)
    if isinstance(environment.runner, WorkerRunner):
        def announce() -> None:
            _state["ready"].get()
            environment.runner.send_message("llm_ready", None)

        gevent.spawn(announce)


def _build(opts, host: str) -> None:
    from llmbench.target import Target, describe_target, load_tokenizer

    host = host.rstrip("/")
    target: Target = describe_target(host, opts.llm_model or None, None, bundled=False)
    tokenizer, _, _ = load_tokenizer(opts.llm_tokenizer or None, target)
    ds_options = json.loads(opts.llm_dataset_options or "{}")
    if opts.llm_dataset_path:
        ds_options["path"] = opts.llm_dataset_path
    requests, _ = datasets.build(opts.llm_dataset, tokenizer, opts.llm_num_prompts, opts.llm_seed, **ds_options)
    offsets = arrivals.schedule(len(requests), opts.llm_rate, opts.llm_burstiness, opts.llm_seed) \
        if opts.llm_rate > 0 else None
    _state.update(model=target.model, url=host + client.BACKENDS[opts.llm_backend], backend=opts.llm_backend,
                  requests=requests, offsets=offsets, ignore_eos=opts.llm_ignore_eos, driver_started=False,
                  duration=opts.llm_duration or float("inf"), users=0,
                  request_timeout=opts.llm_request_timeout, read_timeout=opts.llm_read_timeout or None)


def _master_protocol(environment) -> None:
    runner = environment.runner
    done: set[str] = set()
    ready: set[str] = set()

    def live() -> set[str]:
        return {c.id for c in runner.clients.all if c.state != "missing"}

    def on_start(**_kwargs) -> None:
        gevent.spawn(start_when_ready)

    def start_when_ready() -> None:
        while not ready >= live():
            gevent.sleep(0.05)
        runner.send_message("llm_start", time.time() + START_DELAY)
        gevent.spawn(watch)

    def watch() -> None:
        while True:
            gevent.sleep(0.5)
            if done and done >= live():
                runner.quit()
                return

    runner.register_message("llm_done", lambda environment, msg, **kw: done.add(msg.node_id))
    runner.register_message("llm_ready", lambda environment, msg, **kw: ready.add(msg.node_id))
    events.test_start.add_listener(on_start)


def _setup(environment) -> dict:
    """This worker's share, once its index is known (when its first user starts)."""
    if "t0" in _state:
        return _state
    _state["ready"].get()  # the dataset may still be building when the first users start
    if "t0" in _state:
        return _state
    opts = environment.parsed_options
    index = getattr(environment.runner, "worker_index", 0)
    workers = max(opts.llm_workers, 1)
    name = f"worker-{index}"
    out = Path(opts.llm_records)
    out.mkdir(parents=True, exist_ok=True)
    from locust.runners import WorkerRunner

    if isinstance(environment.runner, WorkerRunner):
        while "start_wall" not in _state:
            gevent.sleep(0.01)
        t0_wall = _state["start_wall"]
    else:
        t0_wall = time.time() + 0.1
    t0 = time.perf_counter() + (t0_wall - time.time())
    worker_meta(out, name).write_text(json.dumps({"worker": name, "t0_wall": t0_wall, "pid": os.getpid()}))
    _state.update(mine=[i for i in range(len(_state["requests"])) if i % workers == index],
                  writer=RecordWriter(worker_records(out, name)), name=name, t0=t0,
                  closed=itertools.count(index, workers))
    gevent.spawn(_watch_stalls, worker_stalls(out, name), t0)
    return _state


def _watch_stalls(path: Path, t0: float) -> None:
    """client_stalls.Watch on gevent's hub: each wake-up later than STALL is written at once (a worker killed
    mid-run keeps what it saw)."""
    tick, stall = client_stalls.TICK, client_stalls.STALL
    with path.open("a") as out:
        last = time.perf_counter()
        while True:
            gevent.sleep(tick)
            now = time.perf_counter()
            if now - last - tick > stall:
                out.write(json.dumps([last + tick - t0, now - t0]) + "\n")
                out.flush()
            last = now


def _finished(environment) -> None:
    """This worker's share is done: its records closed, the master told (it ends the test once every worker is)."""
    _state["writer"].close()
    from locust.runners import WorkerRunner

    if isinstance(environment.runner, WorkerRunner):
        environment.runner.send_message("llm_done", None)
    else:
        environment.runner.quit()


class LLMUser(User):
    """Open loop: the first user of a worker drives that worker's share of the schedule. Closed loop: every
    user sends its next request as soon as the previous one finished, until the requests run out or
    `--llm-duration` has passed; a request under way then is waited for (Locust's own time limit would cut it,
    and its measurement with it), and the worker's last user to stop ends its share."""

    def on_start(self) -> None:
        self.session = locust_transport.make_session()
        self.state = _setup(self.environment)
        self.state["users"] += 1

    @task
    def generate(self) -> None:
        st = self.state
        if st["offsets"] is None:
            delay = st["t0"] - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            i = next(st["closed"]) if time.perf_counter() - st["t0"] < st["duration"] else len(st["requests"])
            if i >= len(st["requests"]):
                st["users"] -= 1
                if st["users"] == 0:
                    _finished(self.environment)
                raise StopUser()
            self._send(i, time.perf_counter() - st["t0"])
            return
        if st["driver_started"]:
            gevent.sleep(3600)
            return
        st["driver_started"] = True
        greenlets = []
        for i in st["mine"]:
            delay = st["t0"] + st["offsets"][i] - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            greenlets.append(gevent.spawn(self._send, i, float(st["offsets"][i])))
        gevent.joinall(greenlets)
        _finished(self.environment)
        gevent.sleep(3600)

    def _send(self, i: int, scheduled: float) -> None:
        st = self.state
        req = st["requests"][i]
        record = RequestRecord(index=i, scheduled=scheduled, dispatched=time.perf_counter() - st["t0"],
                               prompt_len=req.prompt_len, expected_output_len=req.output_len, worker=st["name"],
                               conversation_id=req.conversation_id)
        body = client.payload(st["backend"], st["model"], req, st["ignore_eos"], None)
        parser = client.StreamParser(record, "messages" in body)
        record.start = time.perf_counter() - st["t0"]
        error = None
        try:
            end = locust_transport.post_stream(self.session, st["url"], body, parser,
                                               lambda: time.perf_counter() - st["t0"],
                                               request_timeout=st["request_timeout"],
                                               read_timeout=st["read_timeout"])
        except Exception as err:  # noqa: BLE001 - a failed request is a record, never a crash
            record.error = f"{type(err).__name__}: {err}"
            error = err
            end = time.perf_counter() - st["t0"]
        parser.finish(end)
        st["writer"].write(record)
        self._fire(record, error)

    def _fire(self, record: RequestRecord, error: Exception | None) -> None:
        fire = self.environment.events.request.fire
        n = record.output_tokens or len(record.chunk_times)
        if not record.success:
            fire(request_type="LLM", name="E2E", response_time=(record.end - record.start) * 1000,
                 response_length=0, exception=error or RuntimeError(record.error), context={})
            return
        fire(request_type="LLM", name="TTFT", response_time=record.ttft * 1000, response_length=n, exception=None,
             context={})
        if n > 1:
            fire(request_type="LLM", name="TPOT", response_time=(record.latency - record.ttft) / (n - 1) * 1000,
                 response_length=n, exception=None, context={})
        fire(request_type="LLM", name="E2E", response_time=record.latency * 1000, response_length=n,
             exception=None, context={})
