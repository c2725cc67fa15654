"""Files the installed package reads at run time ship with it: each data file under llmbench/ matches a
package-data glob of pyproject.toml (an editable install would read it from the checkout and hide the gap)."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_planner_data_file_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["llmbench"]
    data = [p.relative_to(ROOT / "llmbench").as_posix() for p in (ROOT / "llmbench" / "plan" / "data").iterdir()
            if p.is_file()]
    assert data and all(any(fnmatch(f, g) for g in globs) for f in data), data
