"""GPUs the planner knows (figures and sources: planning.md §7), their interconnects, and `--gpu-spec FILE`
for any other."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, fields
from pathlib import Path

GB, GiB = 1e9, 2**30


@dataclass(frozen=True)
class Link:
    """GPU-to-GPU interconnect as tensor parallelism sees it: an all-reduce of n bytes over TP GPUs costs
    `latency + 2(TP-1)/TP · n / (bandwidth · efficiency)`. Bandwidths are the datasheets' per direction;
    latency and efficiency are priors (NCCL's small-message latency and achievable bus bandwidth), not
    published figures, and are the first thing to calibrate on a TP sweep."""

    name: str
    bandwidth: float  # bytes/s per direction per GPU
    latency: float  # seconds per collective
    efficiency: float  # achieved / nominal bandwidth


LINKS = {
    "pcie4": Link("PCIe Gen4 x16", 32 * GB, 30e-6, 0.6),
    "pcie5": Link("PCIe Gen5 x16", 64 * GB, 25e-6, 0.6),
    "nvlink3": Link("NVLink3", 300 * GB, 8e-6, 0.75),
    "nvlink4": Link("NVLink4", 450 * GB, 8e-6, 0.8),
    "nvlink5": Link("NVLink5", 900 * GB, 8e-6, 0.8),
    "infinity-fabric": Link("Infinity Fabric", 896 * GB / 7, 12e-6, 0.7),
}


@dataclass(frozen=True)
class GPU:
    name: str
    memory: float  # bytes
    bandwidth: float  # bytes/s, peak
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None
    link: Link
    family: str  # selects the efficiency priors (roofline.py)
    price_per_hour: float | None  # USD per GPU-hour; a user input, these are documented reference points
    price_source: str
    source: str
    cuda_graphs: bool = True  # replays CUDA graphs, so engines pad their steps (tail term `graph padding`)


def _gpu(name, memory, bw, bf16, fp8, link, family, price, price_source, source) -> GPU:
    return GPU(name, memory, bw, bf16, fp8, LINKS[link], family, price, price_source, source)


FAMILIES = ("hopper", "ampere", "ampere-pcie", "ada", "blackwell", "cdna3")  # efficiency priors: roofline.py
NONE_PUBLISHED = "none published in planning.md"
GPUS: dict[str, GPU] = {g.name: g for g in [
    _gpu("A10G", 24 * GB, 600 * GB, 70e12, None, "pcie4", "ampere-pcie", 1.01, "Mélange example config ($1.01/h)",
         "cli99/llm-analysis gpu_configs/a10g-pcie-24gb.json"),
    _gpu("L4", 24 * GiB, 300 * GB, 121e12, 242e12, "pcie4", "ada", None, NONE_PUBLISHED, "AIC systems/l4.yaml"),
    _gpu("L40S", 46068 * 2**20, 864 * GB, 362e12, 733e12, "pcie4", "ada", None, NONE_PUBLISHED,
         "AIC systems/l40s.yaml"),
    _gpu("A100-40GB", 40 * GB, 1555 * GB, 312e12, None, "nvlink3", "ampere", 2.21,
         "CoreWeave 2024-02 A100 via Vidur constants", "cli99/llm-analysis a100-sxm-40gb.json"),
    _gpu("A100-80GB", 80 * GiB, 2039 * GB, 312e12, None, "nvlink3", "ampere", 3.67,
         "Mélange example config ($3.67/h)", "AIC systems/a100_sxm.yaml"),
    _gpu("H100-SXM", 79.18 * GiB, 3350 * GB, 989e12, 1978e12, "nvlink4", "hopper", 4.25,
         "CoreWeave 2024-02 H100 via Vidur constants", "AIC systems/h100_sxm.yaml; memory: the total CUDA reports "
         "and vLLM's gpu_memory_utilization multiplies, 79.18 GiB (llm-d-benchmark config_explorer's H100 logs; "
         "the datasheet's 80 GB is the HBM before the driver's reservation)"),
    _gpu("H100-PCIe", 80 * GiB, 2000 * GB, 756.5e12, 1513e12, "pcie5", "hopper", None, NONE_PUBLISHED,
         "AIC systems/h100_pcie.yaml"),
    _gpu("H100-NVL", 94 * GB, 3938 * GB, 835e12, 1671e12, "pcie5", "hopper", None, NONE_PUBLISHED,
         "NVIDIA H100 datasheet (H100 NVL: 94 GB HBM3, 3.9 TB/s, 835/1,671 dense BF16/FP8 TFLOPS)"),
    _gpu("H200", 143771 * 2**20, 4800 * GB, 989e12, 1978e12, "nvlink4", "hopper", 4.75,
         "midpoint of the 2026 range $2.50-7.00", "AIC systems/h200_sxm.yaml; memory: nvidia-smi's memory.total on "
         "an H200 SXM, 143771MiB (what vLLM's gpu_memory_utilization multiplies; the datasheet's 141 GB is less)"),
    _gpu("GH200", 144 * GB, 4900 * GB, 989e12, 1978e12, "nvlink4", "hopper", None, NONE_PUBLISHED,
         "NVIDIA GH200 datasheet (144 GB HBM3e, 4.9 TB/s; H100's Tensor Cores)"),
    _gpu("H200-NVL", 141 * GB, 4800 * GB, 835e12, 1671e12, "pcie5", "hopper", None, NONE_PUBLISHED,
         "NVIDIA H200 datasheet (H200 NVL: 141 GB, 4.8 TB/s, 835/1,671 dense BF16/FP8 TFLOPS, 600 W)"),
    _gpu("B200", 180 * GiB, 7700 * GB, 2250e12, 4500e12, "nvlink5", "blackwell", None, NONE_PUBLISHED,
         "AIC systems/b200_sxm.yaml"),
    _gpu("GB200", 186 * GB, 8000 * GB, 2500e12, 5000e12, "nvlink5", "blackwell", None, NONE_PUBLISHED,
         "planning.md §7 (AIC systems/gb200.yaml: 8 TB/s, 2,500 dense BF16); memory: NVIDIA GB200 NVL72 datasheet, "
         "13.4 TB HBM3e over 72 GPUs; FP8 twice BF16 as on B200"),
    _gpu("RTX-PRO-6000", 97887 * 2**20, 1792 * GB, 467.8e12, 935.6e12, "pcie5", "ada", None, NONE_PUBLISHED,
         "AIC systems/rtx_pro_6000_server.yaml (Server Edition at 2,430 MHz, nvidia-smi's 97,887 MiB, GDDR7); a "
         "PCIe card with GDDR memory: it borrows the L40S's (Ada) efficiency priors"),
    _gpu("MI300X", 192 * GB, 5300 * GB, 1307.4e12, 2614.9e12, "infinity-fabric", "cdna3", 1.78,
         "midpoint of $1.71-1.85/h listings", "alpharomercoma/MI300X-vs-H200 METHODOLOGY.md"),
    _gpu("MI325X", 256 * GB, 6000 * GB, 1307.4e12, 2614.9e12, "infinity-fabric", "cdna3", None, NONE_PUBLISHED,
         "AMD Instinct MI325X datasheet (256 GB HBM3e, 6 TB/s; MI300X's compute)"),
    _gpu("MI355X", 288 * GB, 8000 * GB, 2516.58e12, 5033.16e12, "infinity-fabric", "cdna3", None, NONE_PUBLISHED,
         "AMD Instinct MI355X (CDNA 4; 288 GB HBM3e, 8 TB/s); dense FP8 from AMD's ISSCC paper, 8,192 "
         "FLOP a clock per CU x 256 CUs x 2.4 GHz, BF16 half of it; MI300X's link and (CDNA 3) efficiency priors"),
]}

ALIASES = {"H100": "H100-SXM", "H100-80GB": "H100-SXM", "H100-SXM5": "H100-SXM", "A100": "A100-80GB",
           "A100-80G": "A100-80GB", "A100-SXM": "A100-80GB", "A100-40G": "A100-40GB", "H200-SXM": "H200",
           "H200-141GB": "H200", "A10": "A10G", "L40S-48GB": "L40S", "MI300": "MI300X", "MI355": "MI355X",
           "GB200-NVL72": "GB200", "B200-180GB": "B200", "RTX-PRO-6000-Blackwell": "RTX-PRO-6000",
           "RTX-PRO-6000-Blackwell-Server-Edition": "RTX-PRO-6000", "RTX6000-PRO": "RTX-PRO-6000",
           # as nvidia-smi names them (its "NVIDIA " dropped), and as benchmark pages write them
           "A100-SXM4-80GB": "A100-80GB", "A100-SXM4-40GB": "A100-40GB", "A100-SXM-80GB": "A100-80GB",
           "H100-80GB-HBM3": "H100-SXM", "H100-SXM-80GB": "H100-SXM", "GH200-480GB": "GH200",
           "H200-NVL-141GB": "H200-NVL"}
VENDORS = ("NVIDIA", "AMDINSTINCT", "AMD", "TESLA")  # name prefixes nvidia-smi and rocm-smi print


def _norm(name: str) -> str:
    """`a100_80gb`, `A100 80GB`, `A100-80GB` all read alike."""
    return "".join(c for c in name.upper() if c.isalnum())


def gpu(name: str) -> GPU:
    """A catalog GPU by name or alias, case and separators ignored; a near miss gets a suggestion."""
    names = {_norm(k): v for k, v in ALIASES.items()} | {_norm(k): k for k in GPUS}
    key = _norm(name)
    for vendor in VENDORS:
        key = key.removeprefix(vendor)
    if key in names:
        return GPUS[names[key]]
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    hint = f"; did you mean {names[close[0]]}?" if close else ""
    raise KeyError(f"unknown GPU {name!r}{hint} (known: {', '.join(GPUS)}; aliases: {', '.join(ALIASES)}; "
                   "or --gpu-spec FILE)")


SPEC_FIELDS = {"name": str, "memory_gb": float, "bandwidth_gb_s": float, "bf16_tflops": float}
SPEC_OPTIONAL = {"fp8_tflops": float, "link": str, "family": str, "price_per_hour": float, "cuda_graphs": bool}


def gpu_from_spec(path: Path) -> GPU:
    """A GPU described in a JSON file: name, memory_gb, bandwidth_gb_s, bf16_tflops (required); fp8_tflops,
    link (one of LINKS), family (efficiency priors to borrow), price_per_hour, cuda_graphs (whether engines replay
    CUDA graphs on it and pad their steps to the captured sizes; default false: a CPU replays none)."""
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise KeyError(f"{path}: cannot read the GPU spec ({err})") from None
    missing = [k for k in SPEC_FIELDS if k not in spec]
    unknown = [k for k in spec if k not in SPEC_FIELDS and k not in SPEC_OPTIONAL]
    if missing or unknown:
        raise KeyError(f"{path}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else []))
            + f" (fields: {', '.join([*SPEC_FIELDS, *SPEC_OPTIONAL])})")
    link = spec.get("link", "pcie4")
    if link not in LINKS:
        raise KeyError(f"{path}: link {link!r} is not one of {', '.join(LINKS)}")
    family = spec.get("family", "hopper")
    if family not in FAMILIES:
        raise KeyError(f"{path}: family {family!r} is not one of {', '.join(FAMILIES)}")
    fp8 = spec.get("fp8_tflops")
    graphs = spec.get("cuda_graphs", False)
    if not isinstance(graphs, bool):
        raise KeyError(f"{path}: cuda_graphs must be true or false, not {graphs!r}")
    return GPU(str(spec["name"]), float(spec["memory_gb"]) * GB, float(spec["bandwidth_gb_s"]) * GB,
               float(spec["bf16_tflops"]) * 1e12, float(fp8) * 1e12 if fp8 else None, LINKS[link], family,
               spec.get("price_per_hour"), f"{path}" if spec.get("price_per_hour") else NONE_PUBLISHED, str(path),
               graphs)


def describe(g: GPU) -> dict:
    """The catalog row as plan.json and `plan --list` show it."""
    return {f.name: getattr(g, f.name) for f in fields(g) if f.name != "link"} | {
        "link": g.link.name, "link_bandwidth": g.link.bandwidth, "link_latency_s": g.link.latency,
        "link_efficiency": g.link.efficiency}
