"""CUDA graphs for decode steps: capture the model's forward once per batch size, then replay it.

A decode step of a small model is mostly kernel-launch overhead; a graph replays all its launches at
once. Each captured size owns static input buffers (token ids, positions, slots, block tables, context
lengths); a batch is padded up to the next captured size (padding rows store nothing: slot −1, context
length 0) and its inputs are copied into the buffers before `replay()`. Only the unified Triton kernel is
captured (the host-side split-KV choice cannot change inside a graph).
"""

from __future__ import annotations

import logging

import torch

from engine.attention.metadata import AttentionMetadata

log = logging.getLogger(__name__)
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, max_batch: int, max_blocks: int, device: torch.device) -> None:
        self.model, self.device = model, device
        self.sizes = [s for s in SIZES if s <= max_batch]
        self.max_blocks = max_blocks
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, dict, torch.Tensor]] = {}
        self.pool = None

    def capture(self) -> None:
        from engine.kernels.paged_attention import tile_shape

        for size in reversed(self.sizes):  # largest first, so smaller graphs reuse its memory pool
            dev = self.device
            buf = {
                "ids": torch.zeros(size, dtype=torch.long, device=dev),
                "pos": torch.zeros(size, dtype=torch.long, device=dev),
                "slots": torch.full((size,), -1, dtype=torch.long, device=dev),
                "tables": torch.zeros(size, self.max_blocks, dtype=torch.int32, device=dev),
                "lens": torch.zeros(size, dtype=torch.int32, device=dev),
            }
            rows = torch.arange(size, device=dev)
            meta = AttentionMetadata(
                query_lens=[1] * size, context_lens=[1] * size,
                cu_seqlens_q=torch.arange(size + 1, dtype=torch.int32, device=dev), seq_lens=buf["lens"],
                block_tables=buf["tables"], slot_mapping=buf["slots"], cu_q=list(range(size + 1)),
                decode_seqs=rows, decode_token_rows=rows, prefill_seqs=[])
            group = self.model.cfg.num_heads // self.model.cfg.num_kv_heads
            meta.cache[("tiles", group)] = (torch.arange(size, dtype=torch.int32, device=dev),
                                            torch.arange(size, dtype=torch.int32, device=dev))
            assert tile_shape(group)[1] >= 1
            with torch.inference_mode():
                for _ in range(2):  # warm up: Triton compiles outside the capture
                    self.model(buf["ids"], buf["pos"], meta, rows)
                torch.cuda.synchronize(dev)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool):
                    logits = self.model(buf["ids"], buf["pos"], meta, rows)
            self.pool = graph.pool()
            self.graphs[size] = (graph, buf, logits)
        log.info("captured CUDA graphs for decode batch sizes %s", self.sizes)

    def fits(self, batch: int) -> bool:
        return bool(self.graphs) and batch <= self.sizes[-1]

    def run(self, ids: list[int], positions: list[int], slots: torch.Tensor, tables: torch.Tensor,
            lens: list[int]) -> torch.Tensor:
        n = len(ids)
        size = next(s for s in self.sizes if s >= n)
        graph, buf, logits = self.graphs[size]
        buf["ids"][:n].copy_(torch.tensor(ids), non_blocking=True)
        buf["pos"][:n].copy_(torch.tensor(positions), non_blocking=True)
        buf["slots"].fill_(-1)
        buf["slots"][:n].copy_(slots, non_blocking=True)
        buf["tables"].zero_()
        buf["tables"][:n, : tables.shape[1]].copy_(tables, non_blocking=True)
        buf["lens"].zero_()
        buf["lens"][:n].copy_(torch.tensor(lens, dtype=torch.int32), non_blocking=True)
        graph.replay()
        return logits[:n].cpu()
