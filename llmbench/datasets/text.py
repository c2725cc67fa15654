"""Prompts of an exact token count: real ShareGPT text cut to length, or vLLM's `random` token ids.

Tokenizer calls here pass `verbose=False`: counting a long text is not a request to a model, and the
"sequence length is longer than the maximum" warning it would print is noise.
"""

from __future__ import annotations

from functools import lru_cache

CORPUS_CONVERSATIONS = 400


def ids_of(tokenizer, text: str, special: bool = True) -> list[int]:
    return tokenizer(text, add_special_tokens=special, verbose=False).input_ids


def count_tokens(tokenizer, text: str) -> int:
    """Token count as vLLM counts prompts: with the tokenizer's special tokens (BOS)."""
    return len(ids_of(tokenizer, text))


@lru_cache(maxsize=4)
def corpus_ids(tokenizer) -> tuple[int, ...]:
    from bundled.sharegpt import load as load_sharegpt

    convs = load_sharegpt().conversations[:CORPUS_CONVERSATIONS]
    return tuple(ids_of(tokenizer, "\n".join(t for c in convs for _, t in c.turns), special=False))


@lru_cache(maxsize=4)
def word_vocab(tokenizer) -> tuple[int, ...]:
    """Token ids that decode to a space and a plain word (" house"). Byte-level and SentencePiece tokenizers
    split text at spaces before merging, so a run of such tokens re-encodes to exactly the same tokens, which
    makes `random` prompts exact in length; special tokens and pieces of multi-byte characters are left out."""
    special = set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    words = [i for i, p in enumerate(pieces) if i not in special and _is_word(tokenizer.convert_tokens_to_string([p]))]
    return tuple(words) or tuple(i for i in range(len(tokenizer)) if i not in special)


def _is_word(text: str) -> bool:
    return len(text) > 1 and text[0] == " " and text[1:].isalpha() and text[1:].isascii()


def special_count(tokenizer) -> int:
    return count_tokens(tokenizer, "hello") - len(ids_of(tokenizer, "hello", special=False))


def _fit(tokenizer, length: int, source) -> str:
    """Decode `source(n, shift)` (n ids, starting `shift` ids later) and re-encode, adjusting n until the text
    is `length` tokens long (special tokens included) where the tokenizer allows: decode -> re-encode can merge
    or split tokens at the edges. Jumps by the difference first, then tries the neighbours of the target and a
    few other starting points; the closest text wins."""
    target = max(length - special_count(tokenizer), 1)
    tried: dict[tuple[int, int], tuple[int, str]] = {}

    def attempt(n: int, shift: int = 0) -> int:
        if (n, shift) not in tried:
            text = tokenizer.decode(source(n, shift))
            tried[n, shift] = (len(ids_of(tokenizer, text, special=False)), text)
        return tried[n, shift][0]

    take = target
    for _ in range(4):
        have = attempt(take)
        if have == target:
            return tried[take, 0][1]
        take = max(take + (target - have), 1)
    for shift in range(4):
        for n in sorted(range(max(target - 3, 1), target + 4), key=lambda n: abs(n - target)):
            if attempt(n, shift) == target:
                return tried[n, shift][1]
    return min(tried.values(), key=lambda v: abs(v[0] - target))[1]


def text_of_length(tokenizer, length: int, offset: int) -> str:
    """Real ShareGPT text, `length` tokens long, starting at a position picked by `offset`."""
    ids = corpus_ids(tokenizer)
    start = offset % max(len(ids) - 4 * length - 8, 1)
    return _fit(tokenizer, length, lambda n, shift: ids[start + shift : start + shift + n])


def random_text_of_length(tokenizer, length: int, offset: int) -> str:
    """vLLM's `random` prompt: consecutive token ids from `offset`, wrapped over the (word) vocabulary."""
    vocab = word_vocab(tokenizer)
    return _fit(tokenizer, length, lambda n, shift: [vocab[(offset + shift + j) % len(vocab)] for j in range(n)])
