"""A model's quantization mode: resolve it from the flags and the checkpoint, then swap every decoder
linear for a `QuantLinear` (quantized at load from a float checkpoint, or read from AWQ/GPTQ tensors)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.layers.quant_linear import QuantLinear, choose_path, quantize_int4, quantize_int8
from engine.loader import CheckpointError, ModelConfig
from engine.quant.formats import awq_to_qparams, gptq_to_qparams

log = logging.getLogger(__name__)
METHODS = ("int8", "int4", "awq", "gptq")
LINEARS = (("self_attn", "qkv_proj"), ("self_attn", "o_proj"), ("mlp", "gate_up_proj"), ("mlp", "down_proj"))
CHECKPOINT_NAMES = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


@dataclass
class QuantInfo:
    method: str
    bits: int
    group_size: int | None
    path: str  # packed | dense
    why: str
    quantized_bytes: int  # the decoder linears as stored (ints + scales + zeros)
    resident_bytes: int  # what those layers occupy in memory now


def resolve(requested: str | None, model_cfg: ModelConfig, folder: Path) -> str | None:
    qc = model_cfg.quantization
    found = (qc or {}).get("quant_method")
    where = folder / "config.json"
    if requested is not None and requested not in METHODS:
        raise ValueError(f"unknown quantization {requested!r}; choose one of {', '.join(METHODS)}")
    if found is None:
        if requested in ("awq", "gptq"):
            raise CheckpointError(f"{where}: --quantization {requested} needs a pre-quantized checkpoint, and this "
                                  "one has no quantization_config (quantize it with `llmbench quantize`)")
        return requested
    if found not in ("awq", "gptq"):
        raise CheckpointError(f"{where}: quantization_config quant_method {found!r} is not supported (awq, gptq)")
    if requested not in (None, found):
        raise CheckpointError(f"{where}: the checkpoint is {found}-quantized; --quantization {requested} "
                              "does not match it")
    if qc.get("bits") != 4:
        raise CheckpointError(f"{where}: quantization_config bits={qc.get('bits')!r} is not supported (only 4)")
    if found == "awq" and str(qc.get("version", "gemm")).lower() != "gemm":
        raise CheckpointError(f"{where}: AWQ version {qc.get('version')!r} is not supported (only gemm)")
    return found


def apply(model: torch.nn.Module, method: str, group: int, qtensors: dict, dtype: torch.dtype,
          device: torch.device, folder: Path, kernel: str = "auto") -> QuantInfo:
    qc = model.cfg.quantization or {}
    if method in ("awq", "gptq"):
        group = qc.get("group_size", 128)
        group = model.cfg.hidden_size if group in (-1, None) else group
    path, why = None, ""
    stored = resident = 0
    for i, layer in enumerate(model.layers):
        for parent_name, name in LINEARS:
            parent = getattr(layer, parent_name)
            dense = getattr(parent, name)
            if method == "int8":
                q, s = quantize_int8(dense.weight)
                z, perm = None, None
            elif method == "int4":
                q, z, s = quantize_int4(dense.weight, group)
                perm = None
            else:
                q, z, s, perm = _from_checkpoint(model, i, parent_name, name, qtensors, method, group, folder)
            if path is None and kernel != "auto":
                path, why = kernel, "set by quantization_kernel"
            if path is None:
                path, why = choose_path(q.to(device), None if z is None else z.to(device), s.to(device), dtype,
                                        device)
                log.info("quantization %s: %s kernels (%s)", method, path, why)
            new = QuantLinear(q.to(device), None if z is None else z.to(device), s.to(device), dense.bias, dtype,
                              path, None if perm is None else perm.to(device))
            stored += new.weight_bytes
            resident += sum(b.numel() * b.element_size() for b in new.buffers())
            setattr(parent, name, new)
    for (module, _shard), tensors in qtensors.items():
        if not module.startswith("layers."):
            raise CheckpointError(f"{folder}: quantized tensors for {module!r} ({', '.join(tensors)}) are not "
                                  "supported; only decoder linears may be quantized")
    return QuantInfo(method, 8 if method == "int8" else 4, None if method == "int8" else group, path, why,
                     stored, resident)


def _from_checkpoint(model, i: int, parent: str, name: str, qtensors: dict, method: str, group: int,
                     folder: Path):
    sizes = model.shard_sizes(name) if name in CHECKPOINT_NAMES else [None]
    dense = getattr(getattr(model.layers[i], parent), name)
    k = dense.in_features
    parts, perms = [], []
    for shard, n in enumerate(sizes):
        key = (f"layers.{i}.{parent}.{name}", shard if n is not None else None)
        hf = f"model.layers.{i}.{parent}.{CHECKPOINT_NAMES.get(name, [name])[shard]}"
        n = n if n is not None else dense.out_features
        tensors = qtensors.pop(key, {})
        for kind in ("qweight", "qzeros", "scales"):
            if kind not in tensors:
                raise CheckpointError(f"{folder}: tensor '{hf}.{kind}' missing from the {method} checkpoint")
        if k % 8 or n % 8 or k % group:
            raise CheckpointError(f"{folder}: {hf} has {k} inputs and {n} outputs; {method} needs multiples of "
                                  f"8 and of the group size {group}")
        try:
            if method == "awq":
                parts.append(awq_to_qparams(hf, tensors["qweight"], tensors["qzeros"], tensors["scales"], k, n,
                                            group))
                perms.append(None)
            else:
                q, z, s, perm = gptq_to_qparams(hf, tensors["qweight"], tensors["qzeros"], tensors["scales"],
                                                tensors.get("g_idx"), k, n, group)
                parts.append((q, z, s))
                perms.append(perm)
        except ValueError as err:
            raise CheckpointError(f"{folder}: {err}") from None
    real = [p for p in perms if p is not None]
    if real and (len(real) != len(perms) or any(not torch.equal(p, real[0]) for p in real)):
        raise CheckpointError(f"{folder}: layer {i} {name}: fused shards use different desc_act orders")
    q, z, s = (torch.cat([p[j] for p in parts]) for j in range(3))
    return q, z, s, real[0] if real else None
