"""CUDA graphs for decode steps: capture the model's forward once per batch size, then replay it.

A decode step of a small model is mostly kernel-launch and host overhead; a graph replays all its launches at
once. A graph reads and writes fixed addresses, so each captured size owns its input buffers for as long as the
graph lives: token ids, positions, slots, logits rows, block tables, context lengths, the query offsets and the
attention tiles, all views into one int64 and one int32 device tensor, filled by two copies per step. A batch
is padded up to the next captured size with rows that read and write nothing (slot -1, context length 0,
block table of zeros), and `padded` checks every index against its tensor's bounds on the host before the
graph may use it: inside a graph an out-of-range index is a device-side fault, not an exception.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from engine.attention.metadata import AttentionMetadata
from engine.step_inputs import Staging, StepInputs

log = logging.getLogger(__name__)
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


@dataclass(frozen=True)
class Limits:
    """What the graph's indices must stay within."""

    vocab: int
    max_positions: int
    num_blocks: int
    block_size: int
    max_blocks: int  # block-table width of every captured graph


@dataclass
class Padded:
    i64: np.ndarray  # ids | positions | slots | logits rows, each `size` long
    i32: np.ndarray  # seq lens | cu_q (size + 1) | tables (size x max_blocks) | tile seq | tile start


def padded(inp: StepInputs, size: int, limits: Limits) -> Padded:
    """A decode batch of n <= size sequences as the flat buffers of a graph of `size` rows, padding rows reading
    and writing nothing. Raises ValueError when an index would fall outside its tensor."""
    n, width = inp.num_seqs, inp.tables.shape[1]
    if not inp.decode_only or len(inp.ids) != n or n > size:
        raise ValueError(f"a graph of {size} rows replays decodes only (got {n} sequences, {len(inp.ids)} tokens)")
    if width > limits.max_blocks:
        raise ValueError(f"block tables of {width} blocks exceed the captured width {limits.max_blocks}")
    i64 = np.zeros(4 * size, np.int64)
    i64[2 * size : 3 * size] = -1
    i64[:n], i64[size : size + n], i64[2 * size : 2 * size + n] = inp.ids, inp.positions, inp.slots
    i64[3 * size :] = np.arange(size)
    tables = np.zeros((size, limits.max_blocks), np.int32)
    tables[:n, :width] = inp.tables
    lens = np.zeros(size, np.int32)
    lens[:n] = inp.seq_lens
    rows = np.arange(size, dtype=np.int32)
    i32 = np.concatenate([lens, np.arange(size + 1, dtype=np.int32), tables.ravel(), rows, rows])
    _check(i64, lens, tables, size, limits)
    return Padded(i64, i32)


def _check(i64: np.ndarray, lens: np.ndarray, tables: np.ndarray, size: int, limits: Limits) -> None:
    ids, positions, slots = i64[:size], i64[size : 2 * size], i64[2 * size : 3 * size]
    capacity = limits.num_blocks * limits.block_size
    bad = [what for what, ok in (
        ("token id", (ids >= 0).all() and (ids < limits.vocab).all()),
        ("position", (positions >= 0).all() and (positions < limits.max_positions).all()),
        ("slot", ((slots == -1) | ((slots >= 0) & (slots < capacity))).all()),
        ("block id", (tables >= 0).all() and (tables < limits.num_blocks).all()),
        ("context length", (lens >= 0).all() and (lens <= limits.max_blocks * limits.block_size).all()),
    ) if not ok]
    if bad:
        raise ValueError(f"decode batch out of bounds for its CUDA graph: {', '.join(bad)}")


class CudaGraphAPI:
    """The three torch.cuda calls a capture needs (a test stands a CPU replayer in for them)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def capture(self, fn, pool):
        graph = torch.cuda.CUDAGraph()
        for _ in range(2):  # warm up: Triton compiles outside the capture
            fn()
        torch.cuda.synchronize(self.device)
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, out, graph.pool()

    @staticmethod
    def replay(graph) -> None:
        graph.replay()


@dataclass
class Captured:
    """One captured size: the graph and every tensor it reads or writes, alive as long as it is."""

    graph: object
    i64: torch.Tensor
    i32: torch.Tensor
    meta: AttentionMetadata
    logits: torch.Tensor


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, max_batch: int, limits: Limits, device: torch.device,
                 api: CudaGraphAPI | None = None) -> None:
        self.model, self.limits, self.device = model, limits, device
        self.api = api or CudaGraphAPI(device)
        self.sizes = [s for s in SIZES if s <= max_batch]
        self.captured: dict[int, Captured] = {}
        self.staging = Staging(device)

    def capture(self) -> None:
        pool = None
        for size in reversed(self.sizes):  # largest first, so smaller graphs reuse its memory pool
            entry = self._buffers(size)
            ids, pos, _, rows = entry.i64.view(4, size)

            def forward(ids=ids, pos=pos, rows=rows, meta=entry.meta) -> torch.Tensor:
                return self.model(ids, pos, meta, rows)

            with torch.inference_mode():
                entry.graph, entry.logits, pool = self.api.capture(forward, pool)
            self.captured[size] = entry
        log.info("captured CUDA graphs for decode batch sizes %s", self.sizes)

    def _buffers(self, size: int) -> Captured:
        width = self.limits.max_blocks
        i64 = torch.zeros(4 * size, dtype=torch.long, device=self.device)
        i64[2 * size : 3 * size] = -1
        i32 = torch.zeros(size + size + 1 + size * width + 2 * size, dtype=torch.int32, device=self.device)
        lens, cu, tables, tile_seq, tile_start = i32.split([size, size + 1, size * width, size, size])
        rows = i64[3 * size :]
        meta = AttentionMetadata(
            query_lens=[1] * size, context_lens=[1] * size, cu_seqlens_q=cu, seq_lens=lens,
            block_tables=tables.view(size, width), slot_mapping=i64[2 * size : 3 * size], cu_q=list(range(size + 1)),
            decode_seqs=rows, decode_token_rows=rows, prefill_seqs=[])
        group = self.model.cfg.num_heads // self.model.cfg.num_kv_heads
        meta.cache[("tiles", group)] = (tile_seq, tile_start)
        i32.copy_(torch.from_numpy(padded(_empty_step(), size, self.limits).i32))
        return Captured(None, i64, i32, meta, torch.empty(0, device=self.device))

    def fits(self, inp: StepInputs) -> bool:
        return bool(self.captured) and inp.decode_only and inp.num_seqs <= self.sizes[-1] and \
            inp.tables.shape[1] <= self.limits.max_blocks

    def run(self, inp: StepInputs) -> torch.Tensor:
        """Logits [n, V] of a decode batch, on the device."""
        size = next(s for s in self.sizes if s >= inp.num_seqs)
        entry = self.captured[size]
        host = padded(inp, size, self.limits)
        self.staging.to_device(host.i64, entry.i64)
        self.staging.to_device(host.i32, entry.i32)
        self.api.replay(entry.graph)
        return entry.logits[: inp.num_seqs]


def _empty_step() -> StepInputs:
    none = np.zeros(0, np.int64)
    return StepInputs(none, none, none, none, none, none, np.zeros(1, np.int32), np.zeros(0, np.int32),
                      np.zeros((0, 1), np.int32))
