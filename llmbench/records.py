"""Per-request records: what the client saw, appended to JSONL the moment each request finishes."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO


@dataclass
class RequestRecord:
    """Times are seconds from the run's start (perf_counter), so records of one run line up."""

    index: int
    scheduled: float  # when the arrival process said to send
    dispatched: float = 0.0  # when the send loop launched it (lag = dispatched - scheduled)
    start: float = 0.0  # just before the HTTP POST, after any concurrency slot (vLLM's `st`)
    end: float = 0.0  # when the response (or the failure) was complete
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk with choices
    chunk_tokens: list[int | None] = field(default_factory=list)  # from continuous usage, when sent
    prompt_len: int = 0  # client-side count; replaced by usage.prompt_tokens when returned
    expected_output_len: int = 0
    expected_prompt_len: int = 0  # the client's (or the trace's) count, kept when the server reports its own
    output_tokens: int | None = None  # usage.completion_tokens
    success: bool = False
    status: int | None = None
    error: str = ""
    warmup: bool = False
    conversation_id: str | None = None
    turn: int = 0
    text_len: int = 0
    worker: str | None = None  # Locust worker, for distributed runs
    usage_ignored: bool = False  # the server's usage contradicted its chunks: tokens counted from chunks
    interrupted: bool = False  # still in flight when the run was stopped (Ctrl-C, SIGTERM): neither done nor failed
    first_output: float | None = None  # the first chunk of answer text (not reasoning): TTFO's end
    reasoning_tokens: int | None = None  # tokens of reasoning (reasoning_content, or <think> text); None: none seen

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def ttfo(self) -> float | None:
        """Time to first output token: the answer's first, after any reasoning (guidellm's TTFO)."""
        return self.first_output - self.start if self.first_output is not None else None

    @property
    def ttfo_bound(self) -> float | None:
        """TTFO as an SLO judges it: a reasoning stream that never answered misses any bound (inf); one without
        reasoning or answer text (token ids only) has its TTFT stand for it."""
        if self.ttfo is not None:
            return self.ttfo
        return float("inf") if self.reasoning_tokens else self.ttft

    @property
    def latency(self) -> float | None:
        return self.chunk_times[-1] - self.start if self.chunk_times else None

    @property
    def itl(self) -> list[float]:
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


class RecordWriter:
    """Appends one JSON line per finished request and flushes, so a crash loses nothing measured. A write that
    fails (a full disk) is remembered in `error` and ends the writing, never the run: the records stay in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: RequestRecord) -> None:
        if self.error:
            return
        try:
            self._file.write(record.to_json() + "\n")
            self._file.flush()
        except OSError as err:
            self.error = f"could not write {self.path} ({err.strerror or err})"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()


def read_records(path: Path | str) -> list[RequestRecord]:
    """Read a records file, skipping a torn last line (a run killed mid-write)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(RequestRecord(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return records


def records_frame(records: list[RequestRecord]):
    """One row per request with the derived latencies (seconds), as a pandas DataFrame."""
    import pandas as pd

    rows = []
    for r in records:
        row = asdict(r)
        row.pop("chunk_times")
        row.pop("chunk_tokens")
        n = r.output_tokens or 0
        row.update(ttft=r.ttft, ttfo=r.ttfo, ttfo_bound=r.ttfo_bound, latency=r.latency, num_chunks=len(r.chunk_times),
                   tpot=(r.latency - r.ttft) / (n - 1) if r.success and n > 1 else None,
                   send_lag=r.dispatched - r.scheduled, client_queue=r.start - r.scheduled)
        rows.append(row)
    return pd.DataFrame(rows)
