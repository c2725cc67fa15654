"""OpenAI request validation and response shapes (as OpenAI and vLLM shape them)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from engine.config import ParamError, SamplingParams

MAX_N = 16
MAX_PROMPTS = 64  # prompts in one completions request


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, type_: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.type = type_ or {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                              413: "invalid_request_error", 503: "service_unavailable"}.get(status, "server_error")
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code or self.status}}


@dataclass
class ParsedRequest:
    chat: bool
    prompts: list[str | list[int]]  # text, or token ids
    params: SamplingParams
    stream: bool
    include_usage: bool
    continuous_usage: bool  # vLLM's stream_options.continuous_usage_stats: usage on every chunk
    model: str
    logprobs: int | None
    max_tokens_given: bool


def _get(body: dict, key: str, kinds: tuple[type, ...], default: Any = None, nullable: bool = True) -> Any:
    value = body.get(key, default)
    if value is None and nullable:
        return default
    if isinstance(value, bool) and bool not in kinds:
        raise APIError(400, f"'{key}' must be of type {' or '.join(k.__name__ for k in kinds)}", key)
    if not isinstance(value, kinds):
        raise APIError(400, f"'{key}' must be of type {' or '.join(k.__name__ for k in kinds)}, "
                            f"got {type(value).__name__}", key)
    return value


def parse_request(body: Any, chat: bool) -> ParsedRequest:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = _get(body, "model", (str,), default="")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError(400, "'messages' must be a non-empty list", "messages")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or \
                    not isinstance(m.get("content"), str | list):
                raise APIError(400, "each message needs a string 'role' and a 'content'", "messages")
            if isinstance(m["content"], list) and not all(
                    isinstance(part, dict) and (part.get("type", "text") != "text" or isinstance(part.get("text"), str))
                    for part in m["content"]):
                raise APIError(400, "each content part must be an object, and a text part's 'text' a string",
                               "messages")
        prompts: list[str | list[int]] = []  # rendered by the server with the chat template
        max_tokens = _get(body, "max_completion_tokens", (int,), _get(body, "max_tokens", (int,)))
        logprobs = _get(body, "top_logprobs", (int,), 0) if _get(body, "logprobs", (bool,), False) else None
    else:
        prompts = _parse_prompt(body.get("prompt"))
        max_tokens = _get(body, "max_tokens", (int,), 16)
        logprobs = _get(body, "logprobs", (int,))
    stop = _get(body, "stop", (str, list), [])
    stream_options = _get(body, "stream_options", (dict,), {})
    try:
        params = SamplingParams(
            n=_get(body, "n", (int,), 1), temperature=_get(body, "temperature", (int, float), 1.0),
            top_p=_get(body, "top_p", (int, float), 1.0), top_k=_get(body, "top_k", (int,), 0),
            min_p=_get(body, "min_p", (int, float), 0.0), seed=_get(body, "seed", (int,)), max_tokens=max_tokens,
            min_tokens=_get(body, "min_tokens", (int,), 0), stop=[stop] if isinstance(stop, str) else stop,
            stop_token_ids=_get(body, "stop_token_ids", (list,), []),
            ignore_eos=_get(body, "ignore_eos", (bool,), False), logprobs=logprobs,
        )
    except ParamError as err:
        raise APIError(400, f"'{err.param}': {err}", err.param) from None
    if params.n > MAX_N:
        raise APIError(400, f"'n' must be between 1 and {MAX_N}, got {params.n}", "n")
    return ParsedRequest(chat, prompts, params, _get(body, "stream", (bool,), False),
                         bool(stream_options.get("include_usage")),
                         bool(stream_options.get("include_usage") and stream_options.get("continuous_usage_stats")),
                         model, logprobs, max_tokens is not None)


def _parse_prompt(prompt: Any) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and len(prompt) > MAX_PROMPTS and not all(isinstance(p, int) for p in prompt):
        raise APIError(400, f"at most {MAX_PROMPTS} prompts in one request, got {len(prompt)}", "prompt")
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [list(prompt)]
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise APIError(400, "'prompt' must be a string, a list of strings, or a list of token ids", "prompt")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def envelope(req_id: str, model: str, chat: bool, stream: bool, choices: list[dict],
             usage_: dict | None = None) -> dict:
    kind = ("chat.completion.chunk" if stream else "chat.completion") if chat else "text_completion"
    body = {"id": req_id, "object": kind, "created": int(time.time()), "model": model, "choices": choices}
    if usage_ is not None:
        body["usage"] = usage_
    return body


def completion_logprobs(tokenizer, token_ids: list[int], entries: list[dict[int, float]] | None) -> dict | None:
    if entries is None:
        return None
    tokens = [tokenizer.convert_ids_to_tokens(t) for t in token_ids]
    return {
        "tokens": tokens,
        "token_logprobs": [e[t] for t, e in zip(token_ids, entries, strict=True)],
        "top_logprobs": [{tokenizer.convert_ids_to_tokens(i): lp for i, lp in e.items()} for e in entries],
        "text_offset": [],
    }


def chat_logprobs(tokenizer, token_ids: list[int], entries: list[dict[int, float]] | None) -> dict | None:
    if entries is None:
        return None
    content = []
    for t, e in zip(token_ids, entries, strict=True):
        content.append({
            "token": tokenizer.convert_ids_to_tokens(t), "logprob": e[t], "bytes": None,
            "top_logprobs": [{"token": tokenizer.convert_ids_to_tokens(i), "logprob": lp, "bytes": None}
                             for i, lp in e.items() if i != t or len(e) == 1],
        })
    return {"content": content}
