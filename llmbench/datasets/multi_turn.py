"""`multi-turn`: ShareGPT conversations replayed turn by turn with the model's actual replies."""

from __future__ import annotations

import random

from bundled.sharegpt import load as load_sharegpt
from llmbench.datasets import DatasetError, DatasetInfo, Request
from llmbench.datasets.text import count_tokens, text_of_length


def build(tokenizer, num_requests: int, seed: int = 0, path: str | None = None, max_turns: int = 4,
          output_len: int | None = None, max_output_len: int = 512, system_prompt_len: int = 0
          ) -> tuple[list[Request], DatasetInfo]:
    """`num_requests` conversations; each yields up to `max_turns` user turns. The client sends the
    history plus the previous *actual* reply at each turn (see runner). With `system_prompt_len`, every
    conversation starts with the same system prompt of that many tokens (an agent's instructions)."""
    load = load_sharegpt(path)
    system = [{"role": "system", "content": text_of_length(tokenizer, system_prompt_len, seed)}] \
        if system_prompt_len else []
    rng = random.Random(seed)
    convs = [c for c in load.conversations if len(c.turns) >= 4]
    rng.shuffle(convs)
    requests = []
    for conv in convs[:num_requests]:
        users = [t for who, t in conv.turns if who in ("human", "user")][:max_turns]
        replies = [t for who, t in conv.turns if who in ("gpt", "assistant", "chatgpt")][:max_turns]
        if len(users) < 2 or not replies:
            continue
        lens = [output_len or min(max(count_tokens(tokenizer, r), 4), max_output_len) for r in replies]
        lens += [lens[-1]] * (len(users) - len(lens))
        requests.append(Request(None, count_tokens(tokenizer, users[0]) + system_prompt_len, lens[0],
                                messages=system + [{"role": "user", "content": users[0]}], conversation_id=conv.id,
                                follow_ups=users[1:], follow_up_output_lens=lens[1:len(users)]))
    if not requests:
        raise DatasetError("no multi-turn ShareGPT conversations found")
    info = DatasetInfo("multi-turn", f"ShareGPT conversations, up to {max_turns} user turns each, history plus "
                       f"actual replies, shared system prompt {system_prompt_len} tokens, seed {seed}",
                       {"max_turns": max_turns, "output_len": output_len, "system_prompt_len": system_prompt_len},
                       [load.damage] if load.damage and path is not None else [])
    return requests, info
