"""Tail term `harness batcher`: a load harness that gathers queries and sends them to the replicas in batches.

AMD's MLPerf v4.1 harness (closed/AMD/code/llama2-70b-99.9/VllmFp8, sync_sut.py and async_sut.py,
`batch_samples_loop`) holds LoadGen's queries until `size` are waiting or `threshold` seconds have passed since it
last sent a batch, checking at each arrival and at each `threshold`-long wait that ends without one, and sends the
batch whole to the next replica in turn. A replica then takes its queries in bursts, one every `threshold` x
replicas seconds under load, and the time a query waits in the harness is part of the TTFT LoadGen measures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HarnessBatcher:
    size: int  # --gpu-batch-size
    threshold: float  # --batcher-threshold, seconds

    def release(self, issued: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For queries issued at the sorted times `issued`: the number of the batch each one goes in and the
        time that batch is sent."""
        n = len(issued)
        batch, sent = np.zeros(n, dtype=int), np.zeros(n)
        if n == 0:
            return batch, sent
        waiting: list[int] = [0]
        last = now = float(issued[0])
        i, count = 1, 0
        while waiting or i < n:
            if waiting and (len(waiting) >= self.size or now - last >= self.threshold):
                out, waiting = waiting[:self.size], waiting[self.size:]
                batch[out], sent[out] = count, now
                count, last = count + 1, now
            if i < n and (not waiting or issued[i] <= now + self.threshold):
                now = float(issued[i])
                waiting.append(i)
                i += 1
            elif waiting:
                now += self.threshold
        return batch, sent

    def to_replica(self, issued: np.ndarray, replicas: int) -> tuple[np.ndarray, np.ndarray]:
        """The queries the first of `replicas` receives (indices into `issued`) and when they reach it."""
        batch, sent = self.release(issued)
        mine = np.flatnonzero(batch % replicas == 0)
        return mine, sent[mine]
