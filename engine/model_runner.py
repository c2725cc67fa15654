"""Owns the model and the KV cache; turns a scheduled batch into one flat forward."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import torch

from engine.attention import prefill_attention
from engine.config import CPU_KV_AUTO_BYTES, EngineConfig
from engine.layers import cpu_dtype
from engine.layers.onednn_linear import PACKED_DTYPES, pack_model
from engine.loader import CheckpointError, ModelConfig, load_weights
from engine.models.llama import LlamaForCausalLM
from engine.quant import apply as quantization
from engine.scheduler import ScheduledBatch
from engine.step_inputs import Chunk, StepInputs, Uploader, build, metadata

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KV_DTYPES = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def huge_pages(t: torch.Tensor) -> bool:
    """Ask Linux to back a large CPU tensor with 2 MiB pages (before it is first touched). Decode attention reads
    blocks scattered over the whole pool; with 4 KiB pages nearly every block costs TLB misses."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        page = 2 * 2**20
        start = (t.data_ptr() + page - 1) // page * page
        end = (t.data_ptr() + t.numel() * t.element_size()) // page * page
        madv_hugepage = 14
        return end > start and libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), madv_hugepage) == 0
    except (OSError, AttributeError):
        return False


def resolve_backend(name: str, device: torch.device) -> str:
    if name == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return name


class ModelRunner:
    def __init__(self, config: EngineConfig, model_cfg: ModelConfig, folder: Path, max_model_len: int,
                 num_blocks: int | None = None) -> None:
        """`num_blocks` fixes the pool size: a draft model mirrors the target's block tables."""
        self.config = config
        self.model_cfg = model_cfg
        self.device = torch.device(config.device)
        self.uploader = Uploader(self.device)
        chosen, self.dtype_choice = cpu_dtype.resolve(
            config.dtype, self.device, model_cfg.hidden_size, model_cfg.intermediate_size,
            quantized=bool(config.quantization or model_cfg.quantization))
        self.dtype = DTYPES[chosen]
        log.info("dtype %s (%s)", chosen, self.dtype_choice)
        self.block_size = config.block_size
        self.backend = resolve_backend(config.attention_backend, self.device)
        with self.device:
            model = LlamaForCausalLM(model_cfg, self.backend)
        qtensors = load_weights(model, folder)
        self.model = model.to(self.dtype).eval()
        method = quantization.resolve(config.quantization, model_cfg, folder)
        if qtensors and method not in ("awq", "gptq"):
            raise CheckpointError(f"{folder}: the weights are quantized (qweight/qzeros/scales) but config.json "
                                  "has no quantization_config saying how")
        self.quant = quantization.apply(self.model, method, config.quantization_group_size, qtensors, self.dtype,
                                        self.device, folder, config.quantization_kernel) if method else None
        self.linear_path = "F.linear"
        if self.device.type == "cpu" and self.dtype in PACKED_DTYPES and config.cpu_linear != "torch":
            with torch.inference_mode():
                self.linear_path = pack_model(self.model, force=config.cpu_linear == "onednn",
                                              few_rows=config.cpu_gemv)
            log.info("linear layers: %s", self.linear_path)
        self.cpp_decode, self.decode_attention = self._decode_attention(config.cpu_attention, model_cfg.head_dim)
        self.tiled_prefill_from, self.prefill_attention = self._prefill_attention(config.cpu_prefill_attention)
        self.layer_kernels = self._layer_kernels(config.cpu_layers)
        self.kv_dtype = KV_DTYPES.get(config.kv_cache_dtype, self.dtype)
        for attn in self.model.attention_layers():
            attn.k_scale, attn.v_scale = attn.k_scale.float(), attn.v_scale.float()
            if self.kv_dtype != self.dtype and not float(attn.k_scale) > 0:
                attn.scale_constants = (config.k_scale_constant, config.v_scale_constant)
        self.max_model_len = max_model_len
        self.num_blocks = num_blocks or self._count_blocks()
        shape = (2, model_cfg.num_layers, self.num_blocks, self.block_size, model_cfg.num_kv_heads,
                 model_cfg.head_dim)
        self.kv_cache = torch.empty(shape, dtype=self.kv_dtype, device=self.device)
        if self.device.type == "cpu":
            huge_pages(self.kv_cache)
        self.kv_cache.zero_()
        for i, attn in enumerate(self.model.attention_layers()):
            attn.k_cache, attn.v_cache = self.kv_cache[0, i], self.kv_cache[1, i]
        log.info("KV cache: %d blocks of %d tokens (%.1f MiB, %s), attention backend %s", self.num_blocks,
                 self.block_size, self.kv_cache.numel() * self.kv_cache.element_size() / 2**20,
                 str(self.kv_dtype).removeprefix("torch."), self.backend)
        self.graphs = None
        if self.device.type == "cuda" and self.backend == "triton" and not config.enforce_eager:
            from engine.cuda_graphs import DecodeGraphs, Limits

            limits = Limits(model_cfg.vocab_size, model_cfg.max_position_embeddings, self.num_blocks, self.block_size,
                            -(-max_model_len // self.block_size) + 1)
            self.graphs = DecodeGraphs(self.model, config.max_num_seqs, limits, self.device)
            with self._no_calibration():
                self.graphs.capture()

    @contextlib.contextmanager
    def _no_calibration(self):
        """fp8 KV scales are computed on the first real forward, never on a profiling or capture forward's
        dummy inputs (a capture would also replay the calibration every step)."""
        layers = self.model.attention_layers()
        saved = [attn.scale_constants for attn in layers]
        for attn in layers:
            attn.scale_constants = None
        try:
            yield
        finally:
            for attn, constants in zip(layers, saved, strict=True):
                attn.scale_constants = constants

    def _decode_attention(self, choice: str, head_dim: int) -> tuple[bool, str]:
        """Whether CPU decodes take the C++ kernel, and what /version reports."""
        if self.device.type != "cpu" or self.backend != "torch":
            return False, self.backend
        if choice == "sdpa":
            return False, "gather + SDPA"
        from engine.kernels import cpu_kernels

        if head_dim % cpu_kernels.WIDTH == 0 and cpu_kernels.available():
            return True, cpu_kernels.status()
        why = f"head_dim {head_dim} is not a multiple of {cpu_kernels.WIDTH}" if head_dim % cpu_kernels.WIDTH \
            else cpu_kernels.status()
        if choice == "cpp":
            raise RuntimeError(f"cpu_attention='cpp' cannot be used: {why}")
        return False, f"gather + SDPA ({why})"

    def _prefill_attention(self, choice: str) -> tuple[int | None, str]:
        """From which context CPU prefills take the tiled matmul path (None: never), and what /version reports."""
        if self.device.type != "cpu" or self.backend != "torch":
            return None, self.backend
        if choice != "auto":
            return (0 if choice == "tiled" else None), f"{choice} (as asked)"
        c = self.model_cfg
        start, why = prefill_attention.tiled_from(c.num_heads, c.num_kv_heads, c.head_dim, self.dtype)
        said = "SDPA" if start is None else f"tiled from {start} tokens of context, SDPA below"
        log.info("prefill attention: %s (%s)", said, why)
        return start, f"{said} ({why})"

    def _layer_kernels(self, choice: str) -> str:
        """Whether RMSNorm, rotary and SiLU * up run as the C++ kernels (CPU only), and what /version reports."""
        if self.device.type != "cpu" or choice == "torch":
            return "torch"
        from engine.kernels import cpu_kernels

        if not cpu_kernels.available():
            if choice == "cpp":
                raise RuntimeError(f"cpu_layers='cpp' cannot be used: {cpu_kernels.status()}")
            return f"torch ({cpu_kernels.status()})"
        for module in self.model.modules():
            if hasattr(module, "cpu_kernel"):
                module.cpu_kernel = True
        return "C++ RMSNorm (residual add folded in), rotary, SiLU * up"

    @property
    def block_bytes(self) -> int:
        c = self.model_cfg
        itemsize = torch.empty(0, dtype=self.kv_dtype, device="meta").element_size()
        return 2 * c.num_layers * self.block_size * c.num_kv_heads * c.head_dim * itemsize

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.model.parameters(), *self.model.buffers()])

    def _count_blocks(self) -> int:
        budget = self.config.kv_cache_memory
        if budget is None:
            budget = self._cuda_budget() if self.device.type == "cuda" else CPU_KV_AUTO_BYTES
            log.info("KV cache memory auto: %.2f GiB", budget / 2**30)
        return max(int(budget // self.block_bytes), 1)

    def _cuda_budget(self) -> int:
        """vLLM's sizing: what is left of utilization x total after a profiling forward at the full token
        budget, attending through a scratch cache just large enough for it."""
        torch.cuda.reset_peak_memory_stats(self.device)
        n = min(self.config.max_num_batched_tokens, self.max_model_len)
        blocks = -(-n // self.block_size)
        c = self.model_cfg
        scratch = torch.zeros((2, c.num_layers, blocks, self.block_size, c.num_kv_heads, c.head_dim),
                              dtype=self.kv_dtype, device=self.device)
        layers = self.model.attention_layers()
        for i, attn in enumerate(layers):
            attn.k_cache, attn.v_cache = scratch[0, i], scratch[1, i]
        with torch.inference_mode(), self._no_calibration():
            self._run(build([Chunk([0] * n, 0, list(range(blocks)), 1)], self.block_size))
        torch.cuda.synchronize(self.device)
        for attn in layers:
            attn.k_cache = attn.v_cache = torch.empty(0, device=self.device)
        del scratch
        free, total = torch.cuda.mem_get_info(self.device)
        peak_extra = torch.cuda.max_memory_allocated(self.device) - torch.cuda.memory_allocated(self.device)
        return int(total * self.config.gpu_memory_utilization - (total - free) - peak_extra)

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        for src, dst in copies:
            self.kv_cache[:, :, dst].copy_(self.kv_cache[:, :, src])

    def execute(self, batch: ScheduledBatch, guesses: dict[int, list[int]] | None = None
                ) -> tuple[torch.Tensor, list[int]]:
        """Run the batch; return logits of the sequences whose chunk reaches their last token, and their
        positions in the batch. `guesses[i]` (speculative tokens) follow sequence i's last token and get a
        logits row each, after the row of the last token."""
        guesses = guesses or {}
        chunks, sampled = [], []
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens, strict=True)):
            start = seq.num_computed_tokens
            last = start + n == seq.num_tokens
            extra = guesses.get(i, [])
            chunks.append(Chunk(seq.token_ids[start : start + n] + extra, start, seq.block_table,
                                (1 + len(extra)) * last))
            if last:
                sampled.append(i)
        self.copy_blocks(batch.copies)
        return self.forward(chunks), sampled

    @torch.inference_mode()
    def forward(self, chunks: list[Chunk]) -> torch.Tensor:
        """One flat forward over every chunk; logits [sum of num_logits, vocab], float32, on the device."""
        inp = build(chunks, self.block_size)
        if self.graphs is not None and self.graphs.fits(inp) and len(inp.logits_rows) == inp.num_seqs:
            return self.graphs.run(inp)
        return self._run(inp)

    def _run(self, inp: StepInputs) -> torch.Tensor:
        dev = self.uploader.upload(inp)
        meta = metadata(inp, dev, "cpp" if self.cpp_decode else "sdpa", self.tiled_prefill_from)
        return self.model(dev["ids"], dev["positions"], meta, dev["logits_rows"])
