"""The server's /metrics (and the bundled engine's steps) while Locust's processes send the load.

The native client scrapes inside its own event loop; a Locust run is other processes, and had no server view at
all (no KV or queue series in the report, no server clock, no prefix-cache share, no engine steps for `plan`). So
the same Scraper runs here in a thread of its own for the run's length, and its points are put on the merged
records' time base (the earliest worker's start, wall clock) before they are written.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import aiohttp

from llmbench.scrape import Scraper, last_step


class ServerWatch:
    """A context manager: scrapes `base_url` once a second from entry to exit; `points` afterwards."""

    def __init__(self, base_url: str, steps_out: Path | None, headers: dict | None = None) -> None:
        self.base_url, self.steps_out, self.headers = base_url.rstrip("/"), steps_out, headers
        self.points: list[dict] = []
        self.notes: list[str] = []
        self.wall0 = 0.0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._watch(),), daemon=True)

    async def _watch(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self._scrape()
        except Exception as err:  # a server view lost costs the series, never the run
            self.notes.append(f"the server could not be watched during the Locust run ({err!r})")
        finally:
            self._ready.set()

    async def _scrape(self) -> None:
        async with aiohttp.ClientSession() as session:
            seen = await last_step(session, self.base_url, self.headers) if self.steps_out else -1
            self.wall0, t0 = time.time(), time.perf_counter()
            scraper = Scraper(session, self.base_url, None, t0, steps_out=self.steps_out, headers=self.headers,
                              last_step=seen)
            self.points, self.notes = scraper.points, scraper.notes  # filled as it scrapes
            scraper.start()
            self._ready.set()
            await self._stop.wait()
            await scraper.stop()

    def __enter__(self) -> ServerWatch:
        self._thread.start()
        self._ready.wait(15)
        return self

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if not self._thread.is_alive():
            self._loop.close()

    def write(self, path: Path, origin_wall: float | None) -> list[dict]:
        """The points on the records' time base (seconds since `origin_wall`), written to `path`."""
        shift = self.wall0 - origin_wall if origin_wall is not None else 0.0
        points = [p | {"t": p["t"] + shift} for p in self.points]
        path.write_text("".join(json.dumps(p) + "\n" for p in points), encoding="utf-8")
        return points
