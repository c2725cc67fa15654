"""Checkpoint layouts of 4-bit weights: AutoAWQ GEMM and AutoGPTQ v1, packed eight nibbles per int32.

Both store, per linear layer with K inputs and N outputs and groups of G inputs, integer weights q in
0..15, integer zero points z and float16 scales s, with W[n, k] = (q[k, n] − z[k // G, n]) · s[k // G, n].
They differ in where the nibbles go (see engine.md §6):

- AWQ GEMM: qweight [K, N/8] packed along the output, nibble i of column c holding output 8c + ORDER[i];
  qzeros [K/G, N/8] the same way; scales [K/G, N].
- GPTQ v1: qweight [K/8, N] packed along the input, row j at bits 4·(j % 8) of row j // 8; qzeros
  [K/G, N/8] packed along the output in plain order and stored as z − 1; scales [K/G, N]; g_idx [K] the
  group of each input row (a permutation when the checkpoint used desc_act).
"""

from __future__ import annotations

import torch

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE = [0, 4, 1, 5, 2, 6, 3, 7]
_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int64)


def _to_int32(packed: torch.Tensor) -> torch.Tensor:
    """int64 holding unsigned 32-bit patterns -> int32 with the same bits."""
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def _pack_last(q: torch.Tensor) -> torch.Tensor:
    """[..., 8m] of 0..15 -> int32 [..., m], element i of each 8 at bits 4i."""
    q = q.to(torch.int64).reshape(*q.shape[:-1], -1, 8)
    return _to_int32((q << _SHIFTS).sum(dim=-1))


def _unpack_last(packed: torch.Tensor) -> torch.Tensor:
    """int32 [..., m] -> [..., 8m] nibbles (uint8), bits 4i first."""
    nibbles = (packed.to(torch.int64)[..., None] >> _SHIFTS) & 0xF
    return nibbles.reshape(*packed.shape[:-1], -1).to(torch.uint8)


def pack_awq(q: torch.Tensor) -> torch.Tensor:
    """q [rows, N] (0..15) -> int32 [rows, N/8] in AutoAWQ's interleaved order (qweight and qzeros)."""
    rows, n = q.shape
    return _pack_last(q.reshape(rows, n // 8, 8)[:, :, AWQ_ORDER].reshape(rows, n))


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    rows, m = packed.shape
    return _unpack_last(packed).reshape(rows, m, 8)[:, :, AWQ_REVERSE].reshape(rows, 8 * m)


def pack_gptq_weight(q: torch.Tensor) -> torch.Tensor:
    """q [K, N] -> int32 [K/8, N], packed along the input."""
    k, n = q.shape
    return _pack_last(q.reshape(k // 8, 8, n).transpose(1, 2)).reshape(k // 8, n)


def unpack_gptq_weight(packed: torch.Tensor) -> torch.Tensor:
    k8, n = packed.shape
    return _unpack_last(packed[..., None]).reshape(k8, n, 8).transpose(1, 2).reshape(8 * k8, n)


def pack_gptq_zeros(z: torch.Tensor) -> torch.Tensor:
    """z [groups, N] (1..15 for v1) -> int32 [groups, N/8] holding z − 1."""
    if int(z.min()) < 1:
        raise ValueError("GPTQ v1 stores zero points minus one; a zero point of 0 cannot be stored")
    return _pack_last(z.to(torch.int64) - 1)


def unpack_gptq_zeros(packed: torch.Tensor) -> torch.Tensor:
    return _unpack_last(packed).to(torch.int64) + 1


def check_shape(name: str, tensor: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(f"tensor {name!r} has shape {tuple(tensor.shape)}, expected {expected} "
                         "from config.json and quantization_config")


def awq_to_qparams(name: str, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, k: int, n: int,
                   group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AWQ GEMM tensors of one linear -> (q [N, K] uint8, z [N, K/G], s [N, K/G] float32)."""
    check_shape(f"{name}.qweight", qweight, (k, n // 8))
    check_shape(f"{name}.qzeros", qzeros, (k // group, n // 8))
    check_shape(f"{name}.scales", scales, (k // group, n))
    return unpack_awq(qweight).T.contiguous(), unpack_awq(qzeros).T.float(), scales.T.float()


def gptq_to_qparams(name: str, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                    g_idx: torch.Tensor | None, k: int, n: int, group: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """GPTQ v1 tensors -> (q [N, K], z [N, groups], s [N, groups], permutation of K or None).

    With desc_act the groups are not contiguous in K: q comes back with its columns sorted by group
    (q[:, j] is input perm[j]), so the contiguous-group formulas apply and the layer reads x[:, perm]."""
    groups = -(-k // group)
    check_shape(f"{name}.qweight", qweight, (k // 8, n))
    check_shape(f"{name}.qzeros", qzeros, (groups, n // 8))
    check_shape(f"{name}.scales", scales, (groups, n))
    q = unpack_gptq_weight(qweight)
    perm = None
    if g_idx is not None:
        check_shape(f"{name}.g_idx", g_idx, (k,))
        if not torch.equal(g_idx.long(), torch.arange(k) // group):
            perm = torch.argsort(g_idx.long(), stable=True)
    q = q.T if perm is None else q.T[:, perm]
    return q.contiguous(), unpack_gptq_zeros(qzeros).T.float(), scales.T.float(), perm

