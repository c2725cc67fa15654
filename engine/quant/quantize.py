"""Offline 4-bit quantization of a local checkpoint: `python -m engine.quant` (`llmbench quantize`).

- rtn: round-to-nearest, asymmetric groups, written in AutoAWQ's GEMM layout.
- awq: activation-aware scales first (Lin et al. 2023, AutoAWQ's search): for each set of linears that
  read the same input, try s = mean|x|^α for α on a grid, keep the α whose quantized output is closest to
  the float output, multiply the linears' input columns by s and fold 1/s into the op before them
  (the RMSNorm, or up_proj before down_proj; v_proj before o_proj when their shapes match). The model
  computes the same function in float; quantization then loses less where activations are large.
- gptq: per linear, the Hessian H = 2/n·Σ xᵀx of its calibration inputs; columns are quantized one at a
  time and each one's error is spread over the columns not yet quantized (Frantar et al. 2022,
  gpt-fast's GPTQ.py), symmetric groups, written in AutoGPTQ's v1 layout.

Calibration is one pass of the float model over ShareGPT text; every layer is calibrated on float
inputs (AutoAWQ and GPTQ re-run each layer on the quantized previous layers; this is the cheaper variant).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import click
import torch

from engine.layers.quant_linear import quantize_int4
from engine.quant.formats import pack_awq, pack_gptq_weight, pack_gptq_zeros

# per decoder layer: (op before, linears reading its output) — AutoAWQ's Llama groups
AWQ_GROUPS = [("input_layernorm", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]),
              ("self_attn.v_proj", ["self_attn.o_proj"]),
              ("post_attention_layernorm", ["mlp.gate_proj", "mlp.up_proj"]),
              ("mlp.up_proj", ["mlp.down_proj"])]
LINEARS = [name for _, names in AWQ_GROUPS for name in names]
MAX_ROWS = 4096  # calibration rows kept per input for the AWQ search


def calibration_batches(tokenizer, num_samples: int, seq_len: int) -> list[torch.Tensor]:
    """Token windows from the start of ShareGPT (held-out evaluation text comes from its end)."""
    from bundled import sharegpt

    batches, buffer = [], []
    for conv in sharegpt.load().conversations:
        for _, text in conv.turns:
            buffer += tokenizer(text).input_ids
            while len(buffer) >= seq_len and len(batches) < num_samples:
                batches.append(torch.tensor([buffer[:seq_len]]))
                buffer = buffer[seq_len:]
        if len(batches) >= num_samples:
            break
    return batches


def capture(model, batches: list[torch.Tensor], hessians: bool) -> dict[str, torch.Tensor]:
    """Inputs of every decoder linear (a random subset of rows), or their Hessians 2/n·Σ xᵀx."""
    found: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    gen = torch.Generator().manual_seed(0)
    hooks = []
    for i, layer in enumerate(model.model.layers):
        for name in LINEARS:
            key = f"{i}.{name}"

            def hook(_m, args, _out, key=key):
                x = args[0].reshape(-1, args[0].shape[-1]).float()
                if hessians:
                    n = counts.get(key, 0)
                    h = found.get(key, torch.zeros(x.shape[1], x.shape[1]))
                    found[key] = h * (n / (n + len(x))) + (2 / (n + len(x))) * x.T @ x
                    counts[key] = n + len(x)
                else:
                    found[key] = torch.cat([found[key], x]) if key in found else x
                    if len(found[key]) > MAX_ROWS:
                        keep = torch.randperm(len(found[key]), generator=gen)[:MAX_ROWS]
                        found[key] = found[key][keep]

            hooks.append(layer.get_submodule(name).register_forward_hook(hook))
    with torch.inference_mode():
        for batch in batches:
            model(batch)
    for h in hooks:
        h.remove()
    return found


def fake_quant(w: torch.Tensor, group: int) -> torch.Tensor:
    q, z, s = quantize_int4(w, group)
    return (q.float() - z.repeat_interleave(group, 1)) * s.repeat_interleave(group, 1)


def _output_error(x: torch.Tensor) -> Callable[[torch.Tensor], float]:
    """mean((x @ d.T)^2) for a weight error d [N, K], the AWQ search's loss. With fewer input columns than rows,
    from the Gram matrix x.T @ x made once: sum((d @ G) * d) costs N K^2 a grid step against x's M K N (the
    default calibration keeps 4,096 rows of 512-2,048 columns)."""
    rows, cols = x.shape
    if cols >= rows:
        return lambda d: float(((x @ d.T) ** 2).mean())
    gram = x.T @ x
    return lambda d: float(((d @ gram) * d).sum()) / (rows * d.shape[0])


@torch.no_grad()
def awq_scale(model, inputs: dict[str, torch.Tensor], group: int, grid: int = 20) -> None:
    """Search and apply AWQ scales in place."""
    for i, layer in enumerate(model.model.layers):
        for prev_name, names in AWQ_GROUPS:
            prev = layer.get_submodule(prev_name)
            linears = [layer.get_submodule(n) for n in names]
            if isinstance(prev, torch.nn.Linear) and prev.weight.shape[0] != linears[0].weight.shape[1]:
                continue  # v_proj -> o_proj under GQA: 1/s cannot be folded into v_proj
            x = inputs[f"{i}.{names[0]}"]
            w = torch.cat([lin.weight.float() for lin in linears])
            output_error = _output_error(x)
            x_mean = x.abs().mean(dim=0)
            best, best_loss = None, math.inf
            for step in range(grid):
                s = x_mean.pow(step / grid).clamp_min(1e-4)
                s = s / (s.max() * s.min()).sqrt()
                loss = output_error(fake_quant(w * s, group) / s - w)
                if loss < best_loss:
                    best, best_loss = s, loss
            for lin in linears:
                lin.weight.mul_(best.to(lin.weight.dtype))
            if isinstance(prev, torch.nn.Linear):
                prev.weight.div_(best[:, None].to(prev.weight.dtype))
                if prev.bias is not None:
                    prev.bias.div_(best.to(prev.bias.dtype))
            else:
                prev.weight.div_(best.to(prev.weight.dtype))


@torch.no_grad()
def gptq_quantize(w: torch.Tensor, h: torch.Tensor, group: int, blocksize: int = 128, damp: float = 0.01
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric 4-bit GPTQ of w [N, K]: q [N, K] in 0..15 (zero point 8) and scales [N, K/G]."""
    w = w.float().clone()
    n, k = w.shape
    h = h.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h += damp * torch.mean(torch.diag(h)) * torch.eye(k)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros(n, k)
    scales = torch.zeros(n, k // group)
    for i1 in range(0, k, blocksize):
        i2 = min(i1 + blocksize, k)
        w1, err1, hinv1 = w[:, i1:i2].clone(), torch.zeros(n, i2 - i1), hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if col % group == 0:
                s = (2 * w1[:, i : i + group].abs().amax(dim=1) / 15).clamp_min(1e-8)
                scales[:, col // group] = s
            qc = (w1[:, i] / s).round().add(8).clamp(0, 15)
            err = (w1[:, i] - (qc - 8) * s) / hinv1[i, i]
            w1[:, i:] -= err[:, None] * hinv1[i, i:][None, :]
            err1[:, i] = err
            q[:, col] = qc
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    return q.to(torch.uint8), scales


def quantize_checkpoint(src: Path, out: Path, method: str, bits: int = 4, group: int = 128,
                        num_samples: int = 32, seq_len: int = 256) -> Path:
    if bits != 4:
        raise ValueError(f"--bits {bits} is not supported: AWQ and GPTQ checkpoints here are 4-bit")
    if method not in ("rtn", "awq", "gptq"):
        raise ValueError(f"unknown method {method!r} (rtn, awq, gptq)")
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    batches = calibration_batches(tokenizer, num_samples, seq_len) if method != "rtn" else []
    if method == "awq":
        awq_scale(model, capture(model, batches, hessians=False), group)
    hessians = capture(model, batches, hessians=True) if method == "gptq" else {}
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    for i, layer in enumerate(model.model.layers):
        for name in LINEARS:
            key = f"model.layers.{i}.{name}"
            w = layer.get_submodule(name).weight.float()
            if w.shape[1] % group or w.shape[0] % 8:
                raise ValueError(f"{key}: shape {tuple(w.shape)} is not a multiple of the group size {group} / 8")
            del state[f"{key}.weight"]
            if method == "gptq":
                q, s = gptq_quantize(w, hessians[f"{i}.{name}"], group)
                z = torch.full_like(s, 8)
                state |= {f"{key}.qweight": pack_gptq_weight(q.T), f"{key}.qzeros": pack_gptq_zeros(z.T),
                          f"{key}.scales": s.T.half().contiguous(),
                          f"{key}.g_idx": (torch.arange(w.shape[1]) // group).to(torch.int32)}
            else:
                q, z, s = quantize_int4(w, group)
                state |= {f"{key}.qweight": pack_awq(q.T), f"{key}.qzeros": pack_awq(z.T.to(torch.uint8)),
                          f"{key}.scales": s.T.half().contiguous()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copyfile(f, out / f.name)
    config = json.loads((src / "config.json").read_text())
    if method == "gptq":
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False,
                                         "sym": True, "static_groups": False, "true_sequential": True,
                                         "checkpoint_format": "gptq"}
    else:
        config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                                         "version": "gemm", "modules_to_not_convert": None,
                                         "llmbench_method": method}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@click.command()
@click.argument("model", type=click.Path(exists=True, file_okay=False))
@click.option("--method", type=click.Choice(["awq", "rtn", "gptq"]), default="awq", show_default=True)
@click.option("--bits", default=4, show_default=True, type=int)
@click.option("--group-size", default=128, show_default=True, type=click.Choice(["32", "64", "128"]))
@click.option("--calib-samples", default=32, show_default=True, type=click.IntRange(1))
@click.option("--calib-seq-len", default=256, show_default=True, type=click.IntRange(16))
@click.option("--out", required=True, type=click.Path(file_okay=False))
def quantize_command(model: str, method: str, bits: int, group_size: str, calib_samples: int, calib_seq_len: int,
         out: str) -> None:
    """Quantize MODEL to 4 bits and write an AWQ (awq, rtn) or GPTQ (gptq) checkpoint to --out."""
    try:
        path = quantize_checkpoint(Path(model), Path(out), method, bits, int(group_size), calib_samples,
                                   calib_seq_len)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    click.echo(path)
