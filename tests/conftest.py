"""Shared fixtures: a private LLMBENCH_HOME with the bundled models built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HOME = Path(os.environ.get("LLMBENCH_TEST_HOME", "/tmp/llmbench-test-home"))
os.environ["LLMBENCH_HOME"] = str(_HOME)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from llmbench.modelbuild import build_model

    return build_model("tiny")


@pytest.fixture(scope="session")
def small_model() -> Path:
    from llmbench.modelbuild import build_model

    return build_model("small")


@pytest.fixture(scope="session")
def hf_tiny(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()
