"""Incremental detokenization: new text per step without re-decoding the whole output."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DetokState:
    text: str = ""
    prefix_offset: int = 0  # window start: a few tokens of context for byte-level merges
    read_offset: int = 0  # tokens already turned into text


def detokenize_step(tokenizer, token_ids: list[int], state: DetokState) -> str:
    """Append the text of newly generated `token_ids` to `state`; return the new text.

    Text is held back while the window ends inside a multi-byte character (U+FFFD)."""
    prefix = tokenizer.decode(token_ids[state.prefix_offset : state.read_offset], skip_special_tokens=True)
    full = tokenizer.decode(token_ids[state.prefix_offset :], skip_special_tokens=True)
    if len(full) <= len(prefix) or full.endswith("\ufffd"):
        return ""
    new = full[len(prefix) :]
    state.text += new
    state.prefix_offset, state.read_offset = state.read_offset, len(token_ids)
    return new
