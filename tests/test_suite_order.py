"""The suite's own order: tests/conftest.py puts the slowest files first, so that two xdist workers handed whole
files in collection order finish together."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import SLOWEST_FILES, pytest_collection_modifyitems


def test_the_slowest_files_exist_and_are_collected_first(request):
    assert set(SLOWEST_FILES) <= {p.name for p in Path(__file__).parent.glob("test_*.py")}, "renamed or removed?"
    slowest, slow = SLOWEST_FILES[:2]
    items = [SimpleNamespace(path=Path(name), n=i) for i, name in
             enumerate(("test_a.py", slow, slowest, slow, "test_b.py"))]
    pytest_collection_modifyitems(items)
    assert [(x.path.name, x.n) for x in items] == [(slowest, 2), (slow, 1), (slow, 3), ("test_a.py", 0),
                                                   ("test_b.py", 4)]
    files = list(dict.fromkeys(item.path.name for item in request.session.items))
    named = [f for f in SLOWEST_FILES if f in files]
    assert files[: len(named)] == named
