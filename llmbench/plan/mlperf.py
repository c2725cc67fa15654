"""MLPerf Inference results as validation rows: LoadGen's own summaries (`mlperf_log_summary.txt`) of the
Llama-2-70B and Llama-3.1-8B benchmarks and both rounds' Mixtral-8x7B (the tuning half's only MoE latencies, added
after the rest), each system with the engine settings its submission's code and configs state. Both rounds are
tuning sources: **v4.1** (`mlcommons/inference_results_v4.1` at 198fc467) from the start,
**v5.1** (`mlcommons/inference_results_v5.1`) held out until the `knee` term (roofline.py), whose exponent chosen
on v4.1 alone (p = 1, the sum) predicted v5.1's Interactive runs, the only ones with a 256-token step budget,
saturated (capacity -42 %, P99 TTFT +1,150 %); v5.1 then joined the tuning half so that the exponent is
chosen over both scenarios (the sum again, once the LM head's FLOPs were counted right), and the held-out half is
the sources never tuned on (published.HELD_OUT).

Each row is a system of `gpus` GPUs serving `gpus / tp` independent replicas (LoadGen spreads the load over
them), so the planner simulates one replica and multiplies. Per system: Offline output tokens/s (every sample at
once); Server and Interactive (Poisson arrivals at `target_qps`): P99 and mean TTFT and TPOT at that rate, and
the rate itself read as a P99-constrained capacity (submitters raise `target_qps` until LoadGen's P99 bounds
fail; LIMITS). Tail term `steady state`: LoadGen's Server run lasts at least ten minutes, so its percentiles are a
steady state's; the simulated run sends a warm-up first (`warm_up`) and measures the requests after it, not every
request from an idle start, while the batch, and with it every step, is still growing. Lengths: the benchmark's
own dataset (data/), outputs rescaled to the tokens per sample the run reports (the model's answers are longer
than the dataset's references). Left out: FP4 systems (B200, GB200: the planner has no FP4 compute), power-capped
(MaxQ), CTS and Triton variants, and engines the planner has no profile for (LLMBoost, Intel's).

Row fields: round, benchmark, submitter, system, GPU, GPUs, TP, engine, weight/KV dtype, output tokens per
sample, Offline tok/s, Offline engine settings, Server (target_qps, P99 TTFT, P99 TPOT, mean TTFT, mean TPOT,
ms), Server settings, Interactive figures, Interactive settings. Settings: (max batch, max tokens per step[,
vLLM scheduler steps]), or a run's own flags as its submission gives them (REDHAT); vLLM runs on AMD GPUs add the
engine facts of AMD's harness (v41_rocm, rocm_engines: v5.1's Llama-2-70B V0 runs with AMD's scheduler patch,
`decode_target`), v4.1's Server runs its query batcher (harness_batcher.py).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from llmbench.plan.case import Case
from llmbench.plan.harness_batcher import HarnessBatcher
from llmbench.plan.mlperf_settings import DATA, REDHAT, rocm_engines, settings, split, v41_rocm
from llmbench.plan.workload import Workload

DATASETS = {"llama2-70b": "mlperf_openorca_lengths.csv.gz", "llama3.1-8b": "mlperf_cnn_dailymail_lengths.csv.gz",
            "mixtral-8x7b": "mlperf_mixtral_lengths.csv.gz"}
MODELS = {"llama2-70b": "llama-2-70b", "llama3.1-8b": "llama-3.1-8b", "mixtral-8x7b": "mixtral-8x7b"}
MAX_OUTPUT = {"llama2-70b": 1024, "llama3.1-8b": 128, "mixtral-8x7b": 1024}
# P99 TTFT and TPOT bounds, ms (mlcommons/inference loadgen/mlperf.conf; workloads.md section 7)
LIMITS = {("llama2-70b", "server"): (2000.0, 200.0), ("llama2-70b", "interactive"): (450.0, 40.0),
          ("llama3.1-8b", "server"): (2000.0, 100.0), ("llama3.1-8b", "interactive"): (500.0, 30.0),
          ("mixtral-8x7b", "server"): (2000.0, 200.0)}
LATER = "v5.1"  # the later round (label M5), tuning since the knee term
SOURCE = ("mlcommons/inference_results_{round}:closed/{submitter}/results/{system}/{bench}/{scenario}/performance/"
          "run_1/mlperf_log_summary.txt")


@dataclass(frozen=True)
class Row:
    round: str
    bench: str
    submitter: str
    system: str
    gpu: str
    gpus: int
    tp: int
    engine: str
    dtype: str
    tokens_per_sample: float
    offline_tok_s: float | None
    offline: tuple | dict | None
    server: tuple | None
    server_cfg: tuple | dict | None
    interactive: tuple | None
    interactive_cfg: tuple | dict | None

    @property
    def replicas(self) -> int:
        return self.gpus // self.tp


ROWS = [
    Row('v4.1', 'llama2-70b', 'NVIDIA', 'DGX-H100_H100-SXM-80GBx8_TRT', 'H100-SXM', 8, 2, 'trtllm', 'fp8', 290.3, 24524.9, (896, 4096), (75.0, 461.3, 175.4, 275.9, 155.0), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'NVIDIA', 'H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.3, 31302.7, (806, 4096), (101.0, 452.7, 146.0, 198.3, 123.3), (896, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'NVIDIA', 'GH200-GraceHopper-Superchip_GH200-144GB_aarch64x1_TRT', 'GH200', 1, 1, 'trtllm', 'fp8', 291.2, 4067.5, (806, 4096), (13.4, 579.3, 192.6, 279.7, 161.3), (806, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'AMD', '1xMI300X_2xEPYC-9374F', 'MI300X', 1, 1, 'vllm@0.4', 'fp8', 293.2, 3062.7, (2048, 65536), (8.6, 785.3, 190.3, 401.9, 153.4), (1024, 49152), None, None),
    Row('v4.1', 'llama2-70b', 'AMD', '8xMI300X_2xEPYC-9374F', 'MI300X', 8, 1, 'vllm@0.4', 'fp8', 293.4, 23514.8, (2048, 65536), (73.5, 1604.2, 197.9, 1006.3, 143.1), (1024, 49152), None, None),
    Row('v4.1', 'llama2-70b', 'AMD', '8xMI300X_2xEPYC-TURIN', 'MI300X', 8, 1, 'vllm@0.4', 'fp8', 293.4, 24109.8, (2048, 65536), (76.0, 1660.4, 198.7, 1038.4, 143.1), (1024, 49152), None, None),
    Row('v4.1', 'llama2-70b', 'Dell', 'XE9680_MI300X_192GBx8', 'MI300X', 8, 1, 'vllm@0.4', 'fp8', 293.7, 22677.6, (2048, 65536), (68.5, 1723.3, 196.0, 1203.9, 142.7), (768, 65536), None, None),
    Row('v4.1', 'llama2-70b', 'HPE', 'HPE_ProLiant_DL380a_H100_NVL_94GBx4_TRT', 'H100-NVL', 4, 2, 'trtllm', 'fp8', 290.3, 8858.8, (1300, 4096), (24.0, 383.9, 121.9, 195.6, 103.9), (640, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Lenovo', 'SR675_V3_8xH100_NVL_TRT', 'H100-NVL', 8, 2, 'trtllm', 'fp8', 291.2, 15875.8, (1300, 4096), (45.0, 359.4, 87.0, 138.9, 67.6), (640, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'ASUSTeK', 'ESC4000A_E12_4XH100_TRT', 'H100-NVL', 4, 2, 'trtllm', 'fp8', 290.9, 6673.9, (1300, 4096), (20.0, 548.1, 166.0, 260.4, 137.9), (640, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Dell', 'XE9680_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 2, 'trtllm', 'fp8', 290.1, 24086.7, (896, 4096), (75.0, 474.0, 179.8, 288.6, 162.1), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Google', 'DGX-H100_H100-SXM-80GBx8_TRT', 'H100-SXM', 8, 2, 'trtllm', 'fp8', 290.1, 24133.7, (896, 4096), (75.0, 484.3, 184.3, 295.4, 166.0), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'HPE', 'HPE_Cray_XD670_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 2, 'trtllm', 'fp8', 290.9, 24528.3, (896, 4096), (80.0, 381.8, 141.0, 229.0, 127.0), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Supermicro', 'SYS_821GE_TNHR_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 2, 'trtllm', 'fp8', 290.1, 24140.1, (896, 4096), (76.4, 862.0, 188.2, 325.4, 170.4), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Dell', 'XE8640_H100_SXM_80GBx4_TRT', 'H100-SXM', 4, 2, 'trtllm', 'fp8', 290.9, 10699.6, (896, 4096), (33.0, 495.0, 186.4, 285.9, 166.0), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Fujitsu', 'GX2560M7_H100_SXM_80GBx4_TRT', 'H100-SXM', 4, 2, 'trtllm', 'fp8', 290.1, 10133.3, (896, 4096), (33.0, 497.9, 188.3, 289.3, 166.8), (1024, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Dell', 'XE9680_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 32124.3, (806, 4096), (102.5, 489.2, 158.9, 209.0, 132.0), (896, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'GigaComputing', 'GIGABYTE_G593_SD1_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 31263.8, (806, 4096), (102.5, 572.4, 195.8, 258.9, 166.3), (896, 4096), None, None),
    Row('v4.1', 'llama2-70b', 'Lenovo', 'Lenovo_8xH200_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 31973.7, (806, 4096), (105.0, 561.0, 191.2, 253.2, 161.7), (896, 4096), None, None),
    Row('v5.1', 'llama2-70b', 'ASUSTeK', 'ESC8000_H200_NVLx8_TRT', 'H200-NVL', 8, 1, 'trtllm', 'fp8', 291.7, 30487.0, (2048, 1536), (88.0, 665.6, 136.9, 290.8, 120.3), (2048, 1536), None, (512, 256)),
    Row('v5.1', 'llama2-70b', 'ASUSTeK', 'ESC_N8_H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 35075.1, (2048, 1536), (118.0, 1715.1, 193.3, 588.6, 183.3), (2048, 1536), None, (512, 256)),
    Row('v5.1', 'llama2-70b', 'Cisco', 'C885_H200x8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 34548.2, (2048, 1536), (114.24, 947.8, 183.0, 397.7, 169.7), (2048, 1536), (67.2, 269.4, 36.8, 99.5, 34.8), (512, 256)),
    Row('v5.1', 'llama2-70b', 'Dell', 'XE7745_H200_NVL_141GBx8_TRT', 'H200-NVL', 8, 1, 'trtllm', 'fp8', 292.3, 31267.4, (2048, 1536), (99.825, 814.6, 190.8, 373.6, 174.3), (2048, 1536), (56.0, 295.2, 39.7, 106.3, 37.4), (256, 256)),
    Row('v5.1', 'llama2-70b', 'Dell', 'XE9680L_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 34588.3, (2048, 1536), (114.24, 950.9, 184.2, 405.8, 170.3), (2048, 1536), None, (512, 256)),
    Row('v5.1', 'llama2-70b', 'Dell', 'XE9680_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 292.3, 35316.7, (2048, 1536), (114.24, 922.1, 180.8, 394.7, 169.1), (2048, 1536), (75.0, 367.1, 38.8, 124.9, 37.2), (512, 256)),
    Row('v5.1', 'llama2-70b', 'Dell_Broadcom', 'vXE9680_H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 293.4, 34301.9, (2048, 1536), (114.24, 960.2, 183.3, 395.9, 168.8), (2048, 1536), None, (512, 256)),
    Row('v5.1', 'llama2-70b', 'Google', 'H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 293.4, 35043.7, (2048, 1536), None, None, (67.2, 252.2, 35.8, 93.6, 34.0), (512, 256)),
    Row('v5.1', 'llama2-70b', 'HPE', 'HPE_Cray_XD670_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 291.7, 34964.6, (2506, 1536), (114.24, 943.5, 184.3, 402.6, 171.2), (2048, 1536), (70.0, 291.1, 37.4, 102.5, 35.2), (512, 256)),
    Row('v5.1', 'llama2-70b', 'Nebius', 'H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 293.4, 34812.1, (2048, 1536), (116.6, 1717.3, 195.6, 589.9, 184.2), (2048, 1536), (79.3, 431.5, 39.6, 137.9, 37.1), (512, 256)),
    Row('v5.1', 'llama2-70b', 'Quanta_Cloud_Technology', 'D74U-7U_H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 293.4, 35091.5, (2048, 1536), (114.24, 970.0, 186.5, 418.2, 173.3), (2048, 1536), None, None),
    Row('v5.1', 'llama2-70b', 'Quanta_Cloud_Technology', 'D75E-4U_H200-NVL-141GBx4_TRT', 'H200-NVL', 4, 1, 'trtllm', 'fp8', 293.4, 15057.6, (2048, 1536), (47.0, 665.3, 190.3, 331.5, 167.6), (2048, 1536), (23.0, 254.3, 39.3, 93.6, 33.3), (512, 256)),
    Row('v5.1', 'llama2-70b', 'AMD', '8xMI300X_2xEPYC_9575F', 'MI300X', 8, 1, 'vllm@0.9', 'fp8', 301.7, 27803.9, (1792, 40960, 11), (83.5, 1914.6, 193.4, 918.5, 144.6), (650, 40960, 9), (29.5, 436.0, 39.5, 201.3, 32.1), (600, 40960, 8)),
    Row('v5.1', 'llama2-70b', 'Dell', 'XE9680_MI300X_192GBx8', 'MI300X', 8, 1, 'vllm@0.6', 'fp8', 301.7, 27325.9, (1792, 40960, 11), (83.0, 1904.4, 189.9, 924.3, 145.8), (650, 40960, 9), (28.3, 430.8, 39.1, 199.9, 32.3), (600, 40960, 8)),
    Row('v5.1', 'llama2-70b', 'AMD', '8xMI325X_2xEPYC_9575F_1', 'MI325X', 8, 1, 'vllm@0.9', 'fp8', 301.0, 34520.4, (2700, 65536, 7), (109.0, 1755.3, 198.3, 883.9, 148.7), (1024, 40960, 9), None, (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'AMD', '8xMI325X_2xEPYC_9575F_2', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 300.9, 34555.0, (2700, 65536, 7), None, (1024, 40960, 9), (61.5, 334.0, 39.8, 117.9, 35.3), (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'ASUSTeK', 'ESC_A8A_MI325X_256GBx8', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 301.1, 33987.4, (2700, 65536, 7), (107.0, 1752.9, 194.3, 872.6, 146.4), (1024, 40960, 9), (52.0, 303.7, 39.4, 111.1, 35.0), (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'GigaComputing', '8xMI325X_2xEPYC_9575F', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 301.0, 34483.2, (2700, 65000, 11), (109.5, 1742.1, 193.7, 857.9, 144.6), (1024, 40960, 9), (63.0, 341.7, 39.6, 117.7, 34.9), (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'MiTAC', '8xMI325X_2xEPYC_9755', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 300.9, 33703.0, (2700, 65536, 7), (108.0, 1733.8, 194.8, 868.4, 148.8), (1024, 40960, 9), (63.0, 343.9, 39.0, 118.5, 34.3), (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'Quanta_Cloud_Technology', 'D75T-7U_8xMI325X', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 300.9, 32760.5, (2700, 65536, 7), (108.0, 1722.7, 191.7, 864.3, 144.5), (1024, 40960, 9), (59.0, 321.3, 39.6, 115.6, 35.1), (3840, 43008, 1)),
    Row('v5.1', 'llama2-70b', 'Vultr', '8xMI325X_2xEPYC_9554', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 301.1, 33762.5, (2700, 65000, 11), (103.0, 1678.8, 135.7, 932.7, 113.3), (1024, 40960, 9), (59.0, 323.2, 38.9, 112.9, 34.6), (3840, 43008, 1)),
    Row('v5.1', 'llama3.1-8b', 'Cisco', 'C845A_H200_NVLx8_TRT', 'H200-NVL', 8, 1, 'trtllm', 'fp8', 128.0, 50776.8, (2048, 1536), (300.0, 129.5, 16.5, 49.5, 13.4), (2048, 1536), None, None),
    Row('v5.1', 'llama3.1-8b', 'HPE', 'HPE_Cray_XD670_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 128.0, 66036.8, (2048, 12000), (505.0, 371.1, 90.4, 177.7, 74.6), (2048, 12000), (415.0, 89.6, 29.0, 42.7, 24.0), (2048, 12000)),
    Row('v5.1', 'llama3.1-8b', 'Quanta_Cloud_Technology', 'D74U-7U_H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 128.0, 56917.3, (2048, 1536), (450.0, 362.7, 26.3, 111.4, 24.2), (2048, 1536), (420.0, 170.5, 26.2, 63.3, 22.7), (2048, 1536)),
    Row('v5.1', 'llama3.1-8b', 'Quanta_Cloud_Technology', 'D75E-4U_H200-NVL-141GBx4_TRT', 'H200-NVL', 4, 1, 'trtllm', 'fp8', 128.0, 25180.8, (2048, 1536), (200.0, 1223.2, 30.2, 321.1, 28.7), (2048, 1536), (170.0, 146.4, 27.7, 53.5, 21.6), (2048, 1536)),
    Row('v5.1', 'llama3.1-8b', 'RedHat', 'IBM_Cloud_gx3-48x240x2l40s_vLLM', 'L40S', 1, 1, 'vllm@0.10', 'fp8', 128.0, 1642.2, REDHAT['L40S Offline'], (9.3, 407.2, 97.1, 123.7, 48.3), REDHAT['L40S Server'], None, None),
    Row('v5.1', 'llama3.1-8b', 'RedHat', 'XE8640_4xH100_vLLM', 'H100-SXM', 1, 1, 'vllm@0.10', 'fp8', 128.0, 5777.1, REDHAT['H100 Offline'], (39.5, 1911.2, 25.1, 359.3, 23.1), REDHAT['H100 Server'], None, None),
    # Mixtral-8x7B (v4.1): settings from each submitter's configs/mixtral-8x7b (NVIDIA's harness, TP 1)
    Row('v4.1', 'mixtral-8x7b', 'Dell', 'XE8640_H100_SXM_80GBx4_TRT', 'H100-SXM', 4, 1, 'trtllm', 'fp8', 145.9, 26824.4, (896, 8192), (176.0, 355.2, 116.5, 155.3, 96.0), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Fujitsu', 'GX2560M7_H100_SXM_80GBx4_TRT', 'H100-SXM', 4, 1, 'trtllm', 'fp8', 145.9, 26641.6, (1024, 8192), (174.0, 328.4, 109.4, 146.2, 90.5), (1024, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'GigaComputing', 'GIGABYTE_G593_SD1_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 145.9, 59334.8, (3072, 16384), (392.0, 570.5, 176.1, 244.4, 148.0), (1200, 8192), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Google', 'DGX-H100_H100-SXM-80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52524.4, (896, 8192), (348.0, 1143.5, 124.5, 201.8, 105.9), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'HPE', 'GH200-GraceHopper-Superchip_GH200-144GB_aarch64x1_TRT', 'GH200', 1, 1, 'trtllm', 'fp8', 145.9, 8063.02, (3072, 16384), (51.0, 503.5, 182.1, 236.2, 139.7), (3072, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'HPE', 'HPE_Cray_XD670_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52395.1, (896, 8192), (348.0, 425.6, 121.0, 169.1, 100.7), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'NVIDIA', 'DGX-H100_H100-SXM-80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52415.9, (896, 8192), (348.0, 628.9, 123.1, 180.0, 102.6), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'NVIDIA', 'GH200-GraceHopper-Superchip_GH200-144GB_aarch64x1_TRT', 'GH200', 1, 1, 'trtllm', 'fp8', 145.9, 8021.46, (3072, 16384), (51.0, 519.2, 190.0, 245.1, 145.5), (3072, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'NVIDIA', 'H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 145.9, 59022.3, (3072, 16384), (392.0, 539.7, 167.0, 227.6, 138.4), (1200, 8192), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Supermicro', 'AS_4125GS_TNHR2_LCC_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 51269.0, (896, 8192), (343.2, 1708.6, 127.6, 254.7, 109.3), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Supermicro', 'AS_8125GS_TNHR_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 50970.6, (896, 8192), (341.6, 1731.0, 127.6, 241.1, 109.1), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Supermicro', 'SYS_421GE_TNHR2_LCC_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52452.0, (896, 8192), (349.6, 1908.0, 125.7, 259.0, 107.7), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Supermicro', 'SYS_821GE_TNHR_H100_SXM_80GBx8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52353.8, (896, 8192), (347.2, 1824.8, 126.7, 256.7, 108.5), (896, 16384), None, None),
    Row('v4.1', 'mixtral-8x7b', 'Sustainable_Metal_Cloud', 'SMC_H100_SXM_80GBX8_TRT', 'H100-SXM', 8, 1, 'trtllm', 'fp8', 145.9, 52817.7, (896, 8192), (348.0, 421.2, 119.8, 167.2, 99.8), (896, 16384), None, None),
    # Mixtral-8x7B (v5.1): settings from each submitter's code (AMD's harness_llm yaml, V0 scheduler with
    # multi-step) or configs (TensorRT-LLM's runtime max_num_tokens); HPE's RTX PRO 6000 left out (not in the catalog)
    Row('v5.1', 'mixtral-8x7b', 'AMD', '8xMI300X_2xEPYC_9575F', 'MI300X', 8, 1, 'vllm@0.9', 'fp8', 143.7, 53017.3, (5000, 51200, 9), (335.0, 1527.7, 151.8, 762.4, 123.6), (4096, 32000, 8), None, None),
    Row('v5.1', 'mixtral-8x7b', 'AMD', '8xMI325X_2xEPYC_9575F_1', 'MI325X', 8, 1, 'vllm@0.9', 'fp8', 143.4, 68781.4, (4736, 51200, 13), (420.0, 1960.6, 194.6, 989.3, 147.0), (2560, 32000, 10), None, None),
    Row('v5.1', 'mixtral-8x7b', 'ASUSTeK', 'ESC_A8A_MI325X_256GBx8', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 143.6, 68121.2, (4736, 51200, 13), (391.0, 1654.9, 159.7, 847.5, 124.4), (2560, 32000, 10), None, None),
    Row('v5.1', 'mixtral-8x7b', 'ASUSTeK', 'ESC_N8_H200-SXM-141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 145.7, 61372.4, (3072, 9216), (410.0, 518.1, 187.2, 320.7, 166.6), (3072, 8192), None, None),
    Row('v5.1', 'mixtral-8x7b', 'Dell', 'XE9680_MI300X_192GBx8', 'MI300X', 8, 1, 'vllm@0.6', 'fp8', 143.5, 53333.9, (5000, 51200, 9), (335.0, 1626.2, 170.2, 820.7, 139.1), (4096, 32000, 8), None, None),
    Row('v5.1', 'mixtral-8x7b', 'GigaComputing', '8xMI325X_2xEPYC_9575F', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 143.3, 69692.0, (4736, 65000, 13), (405.0, 1975.4, 192.7, 981.8, 144.7), (2560, 32000, 10), None, None),
    Row('v5.1', 'mixtral-8x7b', 'HPE', 'HPE_Cray_XD670_H200_SXM_141GBx8_TRT', 'H200', 8, 1, 'trtllm', 'fp8', 145.9, 62108.4, (3072, 9216), (416.0, 591.8, 198.6, 339.1, 175.2), (3072, 8192), None, None),
    Row('v5.1', 'mixtral-8x7b', 'MiTAC', '8xMI325X_2xEPYC_9755', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 143.3, 67964.4, (4736, 51200, 13), (400.0, 1584.8, 147.9, 805.8, 116.0), (2560, 32000, 10), None, None),
    Row('v5.1', 'mixtral-8x7b', 'Quanta_Cloud_Technology', 'D75T-7U_8xMI325X', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 143.4, 68218.7, (4736, 51200, 13), (415.0, 1987.5, 195.1, 991.2, 147.7), (2560, 32000, 10), None, None),
    Row('v5.1', 'mixtral-8x7b', 'Vultr', '8xMI325X_2xEPYC_9575F', 'MI325X', 8, 1, 'vllm@0.6', 'fp8', 143.7, 70035.6, (4736, 65000, 13), (394.0, 1661.5, 145.9, 849.5, 123.0), (2560, 32000, 7), None, None),
]


@cache
def lengths(bench: str) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(DATA / DATASETS[bench], "rt") as f:
        table = np.loadtxt(f, delimiter=",", comments="#", skiprows=3, dtype=int)
    return table[:, 0], table[:, 1]


def workload(bench: str, tokens_per_sample: float) -> Workload:
    """The benchmark's prompts; outputs shaped like the dataset's references, scaled to the run's mean (the
    scaling is repeated once over the outputs the cap clipped, so the mean holds)."""
    prompts, ref = lengths(bench)
    cap = MAX_OUTPUT[bench]
    if tokens_per_sample >= cap - 0.5:  # every answer ran to the cap (Llama-3.1-8B's 128-token summaries)
        return Workload(prompts, np.full(len(prompts), cap), f"MLPerf {bench} lengths, {cap} output tokens each")
    outputs = ref * tokens_per_sample / ref.mean()
    for _ in range(3):
        outputs = np.clip(outputs * tokens_per_sample / np.clip(outputs, 1, cap).mean(), 1, cap)
    return Workload(prompts, np.round(outputs).astype(int), f"MLPerf {bench} lengths, {tokens_per_sample:g} "
                                                             "output tokens per sample")


def _what(row: Row, scenario: str) -> str:
    return (f"M: {MODELS[row.bench]} {row.dtype.upper()}, {row.gpus}x{row.gpu} as {row.replicas} x TP{row.tp}, "
            f"{row.engine}, MLPerf {row.round} {scenario} ({row.submitter} {row.system})")


def _amd_harness(r: Row, scenario: str) -> dict | None:
    """The engine facts of AMD's harness for a vLLM run on an AMD GPU: v4.1's scripts (v41_rocm), v5.1's yamls
    (rocm_engines); None elsewhere."""
    if not (r.engine.startswith("vllm") and r.gpu.startswith("MI")):
        return None
    if r.round == LATER:
        return rocm_engines().get((r.bench, r.submitter, r.system, scenario))
    return v41_rocm(r.submitter, scenario)


def cases(rows: list[Row] | None = None) -> list:
    """One case per row and scenario: Offline throughput; Server and Interactive latencies at the published
    rate and the capacity within LoadGen's P99 bounds."""
    out = []
    for r in ROWS if rows is None else rows:
        label = "M5" if r.round == LATER else "M4"
        common = {"bench": r.bench, "tokens_per_sample": r.tokens_per_sample, "replicas": r.replicas, "streamed": False}
        where = {"round": r.round, "submitter": r.submitter, "system": r.system,
                 "bench": r.bench.replace("llama2-70b", "llama2-70b-99")}
        model, dtype = MODELS[r.bench], r.dtype
        if r.offline_tok_s:
            knobs, fields = split(settings(r.offline, r.engine, r.round, _amd_harness(r, "offline")), dtype)
            out.append(Case(label, _what(r, "Offline"), model, r.gpu, r.tp, r.engine, "offline", 0,
                            {"output_throughput": r.offline_tok_s}, dtype, requests=OFFLINE_REQUESTS, knobs=knobs,
                            source=SOURCE.format(**where, scenario="Offline"), **common | fields))
        for scenario, figures, cfg in (("server", r.server, r.server_cfg),
                                       ("interactive", r.interactive, r.interactive_cfg)):
            if figures is None:
                continue
            rate, p99_ttft, p99_tpot, mean_ttft, mean_tpot = figures
            published = {"capacity": rate, "p99_ttft_ms": p99_ttft, "p99_tpot_ms": p99_tpot,
                         "mean_ttft_ms": mean_ttft, "mean_tpot_ms": mean_tpot}
            knobs, fields = split(settings(cfg, r.engine, r.round, _amd_harness(r, scenario)), dtype)
            out.append(Case(label, _what(r, scenario.title()), model, r.gpu, r.tp, r.engine, scenario, rate,
                            published, dtype, requests=SERVER_REQUESTS, knobs=knobs,
                            source=SOURCE.format(**where, scenario=scenario.title()), **common | fields))
    return out


OFFLINE_REQUESTS, SERVER_REQUESTS = 6000, 2000


def predict(case, setup) -> dict:
    """The system's figures from one simulated replica (`setup`: its step model, engine and workload)."""
    from llmbench.plan.search import at_rate, max_throughput, saturation

    if case.mode == "offline":
        return {"output_throughput": max_throughput(setup, case.requests)["output_throughput"] * case.replicas}
    limits, rate = LIMITS[case.bench, case.mode], case.value / case.replicas
    batcher = HarnessBatcher(*case.batcher) if case.batcher else None
    setup = replace(setup, warm_up=warm_up(rate, setup.requests), batcher=batcher, replicas=case.replicas)
    limit = saturation(setup)
    points = {rate: at_rate(setup, rate)}
    return {k: points[rate][k] for k in ("p99_ttft_ms", "p99_tpot_ms", "mean_ttft_ms", "mean_tpot_ms")} | {
        "capacity": p99_capacity(setup, limits, rate, limit, points) * case.replicas, "utilization": rate / limit}


def warm_up(rate: float, measured: int) -> int:
    """Tail term `steady state`: requests sent before the measured ones, the first WARM_UP_SECONDS of arrivals
    and at least as many as are measured: a replica under load relaxes over several E2E times. On five tuning
    systems (Llama-2-70B and Mixtral, 8.6-52 req/s a replica) the mean TPOT of 2,000 measured requests rose
    11-16 % with 2,000 sent before them (4-8 % with 1,000); on four, 6,000 measured after 6,000 moved the means
    under 6 % (P99s under 10 %) from 4,000 measured after 2,000."""
    return max(measured, int(rate * WARM_UP_SECONDS))


WARM_UP_SECONDS = 60.0  # the first minute of LoadGen's ten


def p99_capacity(setup, limits: tuple[float, float], guess: float, limit: float, points: dict | None = None,
                 steps: int = 5) -> float:
    """LoadGen's verdict searched as submitters search it: the highest Poisson rate below the replica's
    saturation `limit` whose P99 TTFT and P99 TPOT are both within `limits` (bisection from `guess`,
    1/2**steps of the bracket). Its criterion is two percentiles, not search.capacity's share of requests
    meeting every bound, hence a search of its own; `points` holds rates already simulated."""
    from llmbench.plan.search import at_rate

    points = {} if points is None else points

    def ok(rate: float) -> bool:
        if rate >= limit:
            return False
        if rate not in points:
            points[rate] = at_rate(setup, rate)
        return points[rate]["p99_ttft_ms"] <= limits[0] and points[rate]["p99_tpot_ms"] <= limits[1]

    low, high = min(guess, limit) / 2, min(guess * 1.5, limit)
    while not ok(low) and low > guess / 64:
        low, high = low / 2, low
    while ok(high):
        if high >= limit:
            return limit
        low, high = high, min(high * 1.5, limit)
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return (low + high) / 2
