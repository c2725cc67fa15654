"""One forward's inputs: the chunks of a scheduled batch as flat host arrays, then on the device.

The arrays are built with numpy in a few vectorised passes (no Python loop per token), and reach the device
in one copy per dtype: on CUDA they are packed into pinned staging memory and copied asynchronously, two
transfers a step instead of one per tensor; on the CPU the arrays are used in place.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from engine.attention.metadata import AttentionMetadata


@dataclass
class Chunk:
    """Tokens of one sequence computed in a forward, and how many trailing positions need logits."""

    token_ids: list[int]
    start: int  # position of token_ids[0]
    block_table: list[int]
    num_logits: int = 0


@dataclass
class StepInputs:
    """A flat batch on the host: sequence i owns token rows cu_q[i]:cu_q[i+1]."""

    ids: np.ndarray  # int64 [T]
    positions: np.ndarray  # int64 [T]
    slots: np.ndarray  # int64 [T]: block * block_size + offset, -1 = store nothing
    logits_rows: np.ndarray  # int64 [R]: rows whose logits are wanted
    decode_seqs: np.ndarray  # int64 [D]: sequences with one query token
    decode_rows: np.ndarray  # int64 [D]: their rows
    cu_q: np.ndarray  # int32 [B + 1]
    seq_lens: np.ndarray  # int32 [B]: tokens in the cache after this step
    tables: np.ndarray  # int32 [B, W]: block tables padded with 0

    INT64 = ("ids", "positions", "slots", "logits_rows", "decode_seqs", "decode_rows")
    INT32 = ("cu_q", "seq_lens", "tables")

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def decode_only(self) -> bool:
        return len(self.decode_seqs) == self.num_seqs


def build(chunks: list[Chunk], block_size: int, table_width: int | None = None) -> StepInputs:
    """Flatten chunks into one batch; `table_width` pads every block table to that many entries."""
    lens = np.fromiter((len(c.token_ids) for c in chunks), np.int64, len(chunks))
    starts = np.fromiter((c.start for c in chunks), np.int64, len(chunks))
    wanted = np.fromiter((c.num_logits for c in chunks), np.int64, len(chunks))
    cu = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum(lens, out=cu[1:])
    total = int(cu[-1])
    ids = np.fromiter(itertools.chain.from_iterable(c.token_ids for c in chunks), np.int64, total)
    positions = np.arange(total, dtype=np.int64) + np.repeat(starts - cu[:-1], lens)
    width = table_width or max(1, max((len(c.block_table) for c in chunks), default=1))
    tables = np.zeros((len(chunks), width), np.int32)
    for i, c in enumerate(chunks):
        tables[i, : len(c.block_table)] = c.block_table
    seq_of_row = np.repeat(np.arange(len(chunks)), lens)
    slots = tables[seq_of_row, positions // block_size].astype(np.int64) * block_size + positions % block_size
    firsts = np.repeat(cu[1:] - wanted, wanted)
    logits_rows = firsts + np.arange(int(wanted.sum()), dtype=np.int64) - np.repeat(np.cumsum(wanted) - wanted, wanted)
    decode = np.flatnonzero(lens == 1)
    return StepInputs(ids, positions, slots, logits_rows, decode, cu[:-1][decode], cu.astype(np.int32),
                      (starts + lens).astype(np.int32), tables)


class Staging:
    """Host memory for copies to the device, reused every step: pinned on CUDA, so a copy runs asynchronously
    (an event makes the next step wait until the previous copy has left the buffer); on the CPU the array is
    used as it is."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.buffers: dict[np.dtype, tuple[torch.Tensor, torch.cuda.Event]] = {}

    def to_device(self, flat: np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
        if not self.cuda:
            tensor = torch.from_numpy(flat)
            return out.copy_(tensor) if out is not None else tensor
        stage, done = self.buffers.get(flat.dtype, (None, None))
        if stage is None or stage.numel() < flat.size:
            stage = torch.from_numpy(np.empty(max(flat.size, 4096) * 2, flat.dtype)).pin_memory()
            done = torch.cuda.Event()
            self.buffers[flat.dtype] = (stage, done)
        done.synchronize()
        stage.numpy()[: flat.size] = flat
        out = out if out is not None else torch.empty(flat.size, dtype=stage.dtype, device=self.device)
        out.copy_(stage[: flat.size], non_blocking=True)
        done.record()
        return out


class Uploader:
    """StepInputs to the device in one copy per dtype."""

    def __init__(self, device: torch.device) -> None:
        self.staging = Staging(device)

    def upload(self, inp: StepInputs) -> dict[str, torch.Tensor]:
        out = {}
        for names in (inp.INT64, inp.INT32):
            arrays = [getattr(inp, name) for name in names]
            flat = self.staging.to_device(np.concatenate([a.ravel() for a in arrays]))
            offsets = np.cumsum([0, *(a.size for a in arrays)])
            out |= {name: flat[lo:hi].view(a.shape) for name, a, lo, hi in zip(names, arrays, offsets, offsets[1:],
                                                                                 strict=False)}
        return out


def metadata(inp: StepInputs, dev: dict[str, torch.Tensor], decode_kernel: str = "sdpa",
             tiled_prefill_from: int | None = None) -> AttentionMetadata:
    query_lens = np.diff(inp.cu_q).tolist()
    return AttentionMetadata(
        query_lens=query_lens,
        context_lens=inp.seq_lens.tolist(),
        cu_seqlens_q=dev["cu_q"],
        seq_lens=dev["seq_lens"],
        block_tables=dev["tables"],
        slot_mapping=dev["slots"],
        cu_q=inp.cu_q.tolist(),
        decode_seqs=dev["decode_seqs"],
        decode_token_rows=dev["decode_rows"],
        prefill_seqs=[i for i, n in enumerate(query_lens) if n != 1],
        decode_kernel=decode_kernel,
        tiled_prefill_from=tiled_prefill_from,
    )
