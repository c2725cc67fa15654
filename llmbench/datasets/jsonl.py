"""`jsonl`: the user's own requests, one JSON object a line; timestamps make it a trace replay."""

from __future__ import annotations

import json
from pathlib import Path

from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.text import count_tokens


def build(tokenizer, num_requests: int, seed: int = 0, path: str | None = None, output_len: int = 256
          ) -> tuple[list[Request], DatasetInfo]:
    """Each line: {"prompt": str | "messages": [...], "output_len"?: int, "timestamp"?: seconds}."""
    if not path:
        raise DatasetError("the jsonl dataset needs --dataset-path FILE")
    file = Path(path)
    if not file.is_file():
        raise DatasetError(f"{file}: no such dataset file")
    requests, bad = [], 0
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompt, messages = item.get("prompt"), item.get("messages")
            if not isinstance(prompt, str) and not isinstance(messages, list):
                raise ValueError("needs 'prompt' or 'messages'")
            text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in messages)
            ts = item.get("timestamp")
            requests.append(Request(prompt if isinstance(prompt, str) else None, count_tokens(tokenizer, text),
                                    int(item.get("output_len", output_len)), messages=messages,
                                    timestamp=float(ts) if ts is not None else None))
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            bad += 1
            if bad == 1:
                first_error = f"line {lineno}: {err}"
    notes = [f"{file}: skipped {bad} malformed line(s) (first: {first_error}); kept {len(requests)}"] if bad else []
    if not requests:
        raise DatasetError(f"{file}: no usable requests")
    if num_requests:
        requests = requests[:num_requests]
    timed = any(r.timestamp is not None for r in requests)
    return requests, DatasetInfo("jsonl", f"{file.name}: {len(requests)} requests"
                                 f"{' (trace timestamps)' if timed else ''}", {"path": str(file)}, notes)
