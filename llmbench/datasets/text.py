"""Real ShareGPT text cut to an exact token count, for synthetic-length datasets."""

from __future__ import annotations

from functools import lru_cache

CORPUS_CONVERSATIONS = 400


def count_tokens(tokenizer, text: str) -> int:
    """Token count as vLLM counts prompts: with the tokenizer's special tokens (BOS)."""
    return len(tokenizer(text).input_ids)


@lru_cache(maxsize=4)
def corpus_ids(tokenizer) -> tuple[int, ...]:
    from bundled.sharegpt import load as load_sharegpt

    convs = load_sharegpt().conversations[:CORPUS_CONVERSATIONS]
    text = "\n".join(t for c in convs for _, t in c.turns)
    return tuple(tokenizer(text, add_special_tokens=False).input_ids)


def special_count(tokenizer) -> int:
    return count_tokens(tokenizer, "hello") - len(tokenizer("hello", add_special_tokens=False).input_ids)


def text_of_length(tokenizer, length: int, offset: int) -> str:
    """Text whose token count (special tokens included) is exactly `length` where the tokenizer allows."""
    ids = corpus_ids(tokenizer)
    target = max(length - special_count(tokenizer), 1)
    start = offset % max(len(ids) - 4 * target - 1, 1)
    take = target
    text = tokenizer.decode(ids[start : start + take])
    for _ in range(8):  # decode -> re-encode can merge or split tokens at the edges
        have = len(tokenizer(text, add_special_tokens=False).input_ids)
        if have == target:
            break
        take = max(take + (target - have), 1)
        text = tokenizer.decode(ids[start : start + take])
    return text
