"""A run's prompts found in the server's prefix cache, by the server's own counters (prefix_reuse.py)."""

import json

import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.prefix_reuse import hit_rate, note


def test_the_runs_share_is_the_counters_differences_over_it():
    points = [{"t": 0.0, "prefix_queries": 1000.0, "prefix_hits": 200.0}, {"t": 1.0, "running": 2.0},
              {"t": 2.0, "prefix_queries": 1400.0, "prefix_hits": 500.0}]
    assert hit_rate(points) == {"server_prefix_hit_rate": pytest.approx(0.75)}
    assert hit_rate(points[:1]) == {} and hit_rate([{"running": 1.0}] * 3) == {}
    assert hit_rate([points[0], points[0]]) == {}  # nothing looked up: no share


def test_only_a_drawn_workload_that_found_much_of_itself_cached_is_told():
    found = {"server_prefix_hit_rate": 0.75}
    assert "75% of this run's prompt tokens" in note(found, drawn=True, cache_reset=False)
    assert "no one reset the cache" in note(found, drawn=True, cache_reset=False)
    assert "reset before the run" in note(found, drawn=True, cache_reset=True)
    assert note(found, drawn=False, cache_reset=False) is None  # shared-prefix, multi-turn: cached by design
    assert note({"server_prefix_hit_rate": 0.1}, drawn=True, cache_reset=False) is None
    assert note({}, drawn=True, cache_reset=False) is None


def test_a_second_rate_that_resends_the_first_ones_prompts_is_told_so(tmp_path, tiny_model):
    """The bundled engine with its cache kept (--keep-prefix-cache): the second rate sends the same seeded draw,
    and the engine's own counters find it cached; the first found (almost) nothing."""
    out = tmp_path / "kept"
    r = CliRunner().invoke(main, ["sweep", "--model", str(tiny_model), "--rate", "100,200", "--num-prompts", "6",
                                  "--output-len", "4", "--keep-prefix-cache", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    first, second = (json.loads((out / f"rate-{x}.json").read_text()) for x in (100, 200))
    assert first["server_prefix_hit_rate"] < 0.25 and second["server_prefix_hit_rate"] > 0.5
    assert not any("prefix cache:" in n for n in first["notes"])
    assert any("already in its prefix cache" in n for n in second["notes"])
