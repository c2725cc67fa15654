"""Public production traces, replayed at their own timestamps: Azure LLM inference, BurstGPT and Mooncake.

    azure     CSV  TIMESTAMP (e.g. 2023-11-16 18:17:03.9799600), ContextTokens, GeneratedTokens
                   [NumImages: the 2025 multimodal variant; read and said to be ignored]
    burstgpt  CSV  Timestamp (s), Session ID, Elapsed time, Model, Request tokens, Response tokens,
                   Total tokens, Log Type; rows with 0 response tokens are failures: skipped and counted
    mooncake  JSONL  timestamp (ms), input_length, output_length, hash_ids (one id per block of
                   --hash-block-size tokens, 512 in Mooncake's traces; 16 in Bailian's, 64 in WEKA's);
                   Bailian's chat_id / parent_chat_id chain turns into sessions

Rows of one session (BurstGPT's Session ID, a Bailian chain) replay as a conversation: a later turn goes at its
own timestamp, or once the reply before it arrived if that is later (`sessions_on=False`: every row alone).

The traces publish lengths, not text: each prompt is synthesized with the target's tokenizer to the trace's
length. Mooncake's equal hash ids become identical token blocks, so a server's prefix cache sees the sharing
the trace recorded. `time_scale` divides the gaps (2: twice as fast); `trace_start` and `trace_duration` (s,
from the first arrival) cut a window out of a day.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.text import count_tokens, random_text_of_length, word_vocab

FORMATS = ("azure", "burstgpt", "mooncake")
AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Model", "Request tokens", "Response tokens")
MOONCAKE = ("timestamp", "input_length", "output_length")


def build(fmt: str, tokenizer, num_requests: int, seed: int = 0, path: str | None = None, time_scale: float = 1.0,
          trace_start: float = 0.0, trace_duration: float | None = None, model_filter: str | None = None,
          block_size: int = 512, sessions_on: bool = True) -> tuple[list[Request], DatasetInfo]:
    if not path:
        raise DatasetError(f"the {fmt} dataset needs --dataset-path FILE")
    file = Path(path)
    if not file.is_file():
        raise DatasetError(f"{file}: no such dataset file")
    if time_scale <= 0:
        raise DatasetError(f"--time-scale must be positive, got {time_scale}")
    rows, notes = read_rows(fmt, file, model_filter)
    rows = rows.sort_values("t", kind="stable")
    rows["t"] = (rows["t"] - rows["t"].iloc[0]) if len(rows) else rows["t"]
    window = (rows["t"] >= trace_start) & ((rows["t"] < trace_start + trace_duration) if trace_duration else True)
    rows = rows[window]
    if num_requests:
        rows = rows.head(num_requests)
    if rows.empty:
        raise DatasetError(f"{file}: no requests in the window asked (--trace-start {trace_start:g}, "
                           f"--trace-duration {trace_duration})")
    singles = [_request(tokenizer, row, (float(row.t) - trace_start) / time_scale, block_size, seed + i)
               for i, row in enumerate(rows.itertuples())]
    span = singles[-1].timestamp
    requests = sessions(singles, tokenizer, seed, history=fmt == "burstgpt") if sessions_on else singles
    turns = len(singles) - len(requests)
    description = (f"{fmt} trace {file.name}: {len(singles)} requests over {span:.1f} s"
                   + (f" ({time_scale:g}x speed)" if time_scale != 1 else "") + ", replayed at its timestamps"
                   + (f"; {turns} of them later turns of {sum(bool(r.follow_ups) for r in requests)} sessions, "
                      "each sent once the reply before it arrived" if turns else ""))
    options = {"path": str(file), "time_scale": time_scale, "trace_start": trace_start,
               "trace_duration": trace_duration, "model_filter": model_filter, "block_size": block_size,
               "sessions": sessions_on}
    return requests, DatasetInfo(fmt, description, options, notes)


def sessions(singles: list[Request], tokenizer, seed: int, history: bool) -> list[Request]:
    """Rows of one session become one conversation: later turns wait for the reply before them and go at their
    own timestamp if that is later. With `history` (BurstGPT: a turn's request tokens count the conversation
    so far) each turn carries the history plus the actual reply and adds a user message of the tokens the trace
    adds; without (Mooncake/Bailian: hash ids already encode the shared history) each turn is its whole prompt."""
    grouped: dict[str, list[Request]] = {}
    order: list[Request | list[Request]] = []
    for req in singles:
        if req.conversation_id is None:
            order.append(req)
        elif req.conversation_id in grouped:
            grouped[req.conversation_id].append(req)
        else:
            grouped[req.conversation_id] = [req]
            order.append(grouped[req.conversation_id])
    out = []
    for item in order:
        if isinstance(item, Request) or len(item) == 1:
            out.append(item if isinstance(item, Request) else item[0])
            continue
        first, later = item[0], item[1:]
        first.follow_up_at = [r.timestamp for r in later]
        first.follow_up_output_lens = [r.output_len for r in later]
        first.follow_ups_whole = not history
        if history:
            so_far, texts = first.prompt_len + first.output_len, []
            for i, r in enumerate(later):
                added = r.prompt_len - so_far if r.prompt_len > so_far else r.prompt_len
                texts.append(random_text_of_length(tokenizer, max(added, 1), seed + 7919 * (i + 1) + len(out)))
                so_far += max(added, 1) + r.output_len
            first.follow_ups = texts
            first.messages = [{"role": "user", "content": first.prompt}]
        else:
            first.follow_ups = [r.prompt for r in later]
        out.append(first)
    return out


def read_rows(fmt: str, file: Path, model_filter: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The trace's rows as `t` (s), `input`, `output` (and `session`, `hash_ids` where it has them)."""
    return {"azure": _azure, "burstgpt": _burstgpt, "mooncake": _mooncake}[fmt](Path(file), model_filter)


def _columns(frame: pd.DataFrame, file: Path, needed: tuple[str, ...]) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DatasetError(f"{file}: no column {', '.join(missing)} (it has {', '.join(map(str, frame.columns))})")


def _azure(file: Path, _model_filter) -> tuple[pd.DataFrame, list[str]]:
    frame = pd.read_csv(file)
    _columns(frame, file, AZURE)
    stamps = pd.to_datetime(frame["TIMESTAMP"], errors="coerce")
    if stamps.isna().any():
        raise DatasetError(f"{file}: unreadable TIMESTAMP in row {int(stamps.isna().idxmax()) + 2}")
    notes = ["NumImages is read but ignored: the prompts sent are text only"] if "NumImages" in frame else []
    t = (stamps - stamps.min()).dt.total_seconds()
    return pd.DataFrame({"t": t, "input": frame["ContextTokens"], "output": frame["GeneratedTokens"]}), notes


def _burstgpt(file: Path, model_filter: str | None) -> tuple[pd.DataFrame, list[str]]:
    frame = pd.read_csv(file)
    _columns(frame, file, BURSTGPT)
    notes = []
    if model_filter:
        frame = frame[frame["Model"].astype(str) == model_filter]
        if frame.empty:
            raise DatasetError(f"{file}: no row of model {model_filter!r} (--model-filter)")
    failed = frame["Response tokens"] <= 0
    if failed.any():
        notes.append(f"{int(failed.sum())} rows with 0 response tokens (failures in the trace) skipped")
    frame = frame[~failed]
    rows = pd.DataFrame({"t": frame["Timestamp"].astype(float), "input": frame["Request tokens"],
                         "output": frame["Response tokens"]})
    if "Session ID" in frame:
        rows["session"] = frame["Session ID"].astype(str)
    return rows, notes


def _mooncake(file: Path, _model_filter) -> tuple[pd.DataFrame, list[str]]:
    items = []
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            items.append({"t": float(item["timestamp"]) / 1000.0, "input": int(item["input_length"]),
                          "output": int(item["output_length"]), "hash_ids": list(item.get("hash_ids") or []),
                          "chat_id": item.get("chat_id"), "parent": item.get("parent_chat_id")})
        except (ValueError, KeyError, TypeError) as err:
            raise DatasetError(f"{file}: line {lineno} is not a Mooncake record ({err}; it needs "
                               f"{', '.join(MOONCAKE)} and optionally hash_ids)") from None
    frame = pd.DataFrame(items, columns=["t", "input", "output", "hash_ids", "chat_id", "parent"])
    if frame["chat_id"].notna().any():  # Bailian: a turn names the chat it follows; a session is a chain's root
        parent = dict(zip(frame["chat_id"], frame["parent"], strict=True))

        def root(chat):
            seen = set()
            while parent.get(chat) not in (None, -1, "-1") and chat not in seen and not pd.isna(parent.get(chat)):
                seen.add(chat)
                chat = parent[chat]
            return str(chat)

        frame["session"] = [root(c) if not pd.isna(c) else None for c in frame["chat_id"]]
    return frame.drop(columns=["chat_id", "parent"]), []


def _request(tokenizer, row, at: float, block_size: int, seed: int) -> Request:
    length, output = max(int(row.input), 1), max(int(row.output), 1)
    ids = getattr(row, "hash_ids", None)
    if ids:
        prompt = _blocks_text(tokenizer, ids, length, block_size)
    else:
        prompt = random_text_of_length(tokenizer, length, int(np.random.default_rng(seed).integers(0, 2**31)))
    return Request(prompt, count_tokens(tokenizer, prompt), output, timestamp=at,
                   conversation_id=getattr(row, "session", None))


def _blocks_text(tokenizer, hash_ids: list, length: int, block_size: int) -> str:
    """One block of word tokens per hash id, the same tokens for the same id (seeded by it): requests that
    share a prefix of ids share that prefix of text, token for token. The last block holds the remainder."""
    vocab = word_vocab(tokenizer)
    tokens: list[int] = []
    for i, block in enumerate(hash_ids):
        take = min(block_size, length - len(tokens)) if i == len(hash_ids) - 1 else block_size
        rng = np.random.default_rng(block if isinstance(block, int) and block >= 0 else
                                    int(hashlib.sha1(str(block).encode()).hexdigest()[:8], 16))
        tokens += [vocab[j] for j in rng.integers(0, len(vocab), max(take, 0))]
    return tokenizer.decode(tokens[:length] if len(tokens) > length else tokens)
