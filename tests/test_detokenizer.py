"""Incremental detokenization: the DecodeStream path gives what the window path and a full decode give, one
token or several (speculative) a step, with characters split over tokens held back until whole."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engine.detokenizer import CONTEXT, DetokState, _window_step, detokenize_step

TEXTS = ["Hello world, ünïcödé 你好 — test  spaces\n\nnew line 🤖 end.", "def f(x):\n    return x ** 2  # 平方",
         "émoji 👩‍👩‍👧 and tabs\tand ‘quotes’ … done"]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("per_step", [1, 3])
def test_stream_matches_window_and_full_decode(tiny_model, text, per_step):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    assert getattr(tok, "backend_tokenizer", None) is not None
    ids = tok(text).input_ids
    whole = tok.decode(ids, skip_special_tokens=True)
    # prompts that end on a character boundary, as a prompt made from text does (a cut inside a character
    # leaves the two paths to disagree on whose bytes those are)
    cuts = [c for c in range(1, len(ids) - 1) if tok.decode(ids[:c], skip_special_tokens=True)
            + tok.decode(ids[c:], skip_special_tokens=True) == whole]
    assert len(cuts) > 5
    for cut in cuts:
        texts, pieces = [], []
        for step in (detokenize_step, _window_step):
            state = DetokState(prefix_offset=max(cut - CONTEXT, 0), read_offset=cut)
            got = []
            for end in range(cut + per_step, len(ids) + per_step, per_step):  # speculative steps add several
                got.append(step(tok, ids[: min(end, len(ids))], state))
            texts.append(state.text)
            pieces.append("".join(got))
        assert texts[0] == texts[1] == pieces[0], (cut, texts)
        assert texts[0] == tok.decode(ids[cut:], skip_special_tokens=True)


def test_a_character_split_over_tokens_is_held_back(tiny_model):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    prompt = tok("Say").input_ids
    ids = prompt + tok(" 🤖!", add_special_tokens=False).input_ids
    state, seen = DetokState(prefix_offset=max(len(prompt) - CONTEXT, 0), read_offset=len(prompt)), []
    for end in range(len(prompt) + 1, len(ids) + 1):
        seen.append(detokenize_step(tok, ids[:end], state))
    assert "".join(seen) == state.text == " 🤖!" and not any("\ufffd" in s for s in seen)
