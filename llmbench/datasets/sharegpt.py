"""vLLM's ShareGPT sampling rules over the conversations `bundled.sharegpt` reads."""

from __future__ import annotations

from dataclasses import dataclass

from bundled.sharegpt import Conversation, DatasetError


@dataclass(frozen=True)
class LengthFilter:
    """vLLM's ShareGPT filters ("copied from the original sample_sharegpt_requests")."""

    min_len: int = 4
    max_prompt_len: int = 1024
    max_total_len: int = 2048

    def keeps(self, prompt_len: int, output_len: int, fixed_output: bool) -> bool:
        if prompt_len < self.min_len or (not fixed_output and output_len < self.min_len):
            return False
        return prompt_len <= self.max_prompt_len and prompt_len + output_len <= self.max_total_len


@dataclass(frozen=True)
class SampledPair:
    prompt: str
    prompt_len: int
    output_len: int
    conversation_id: str


def sample_pairs(
    conversations: list[Conversation],
    count: int,
    count_tokens,
    seed: int = 0,
    output_len: int | None = None,
    limits: LengthFilter = LengthFilter(),
    shuffle: bool = True,
    oversample: bool = True,
) -> list[SampledPair]:
    """vLLM's ShareGPT sampling: first two turns, seeded shuffle, the four length filters, top-up by
    duplication. `count_tokens(text) -> int` counts with the target's tokenizer (special tokens included)."""
    import random

    rng = random.Random(seed)
    entries = [c for c in conversations if len(c.turns) >= 2]
    if shuffle:
        rng.shuffle(entries)
    picked: list[SampledPair] = []
    for conv in entries:
        if len(picked) == count:
            break
        prompt, completion = conv.turns[0][1], conv.turns[1][1]
        prompt_len = count_tokens(prompt)
        out_len = output_len if output_len is not None else count_tokens(completion)
        if limits.keeps(prompt_len, out_len, output_len is not None):
            picked.append(SampledPair(prompt, prompt_len, out_len, conv.id))
    if not picked:
        raise DatasetError("no ShareGPT conversation passes the length filters")
    if oversample and len(picked) < count:
        rng = random.Random(seed)
        picked += [rng.choice(picked) for _ in range(count - len(picked))]
    return picked
