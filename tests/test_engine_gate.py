"""Our own CI gate: the bundled engine's scheduling and caching advantages, as ratios measured in one job
against the committed baseline. A scheduler or prefix-cache regression fails here.

Re-record after an intended change:  python -m tests.test_engine_gate  (writes benchmarks/baselines/).
"""

from pathlib import Path

from click.testing import CliRunner

from llmbench.cli import main

BASELINE = Path(__file__).resolve().parents[1] / "benchmarks" / "baselines" / "engine_ratios.json"
PAIRS = {
    "continuous-vs-static": [
        "--candidate", "batching=continuous,max_num_seqs=16,kv_cache_memory=64MiB",
        "--reference", "batching=static,max_num_seqs=16,kv_cache_memory=64MiB",
        "--dataset", "sharegpt", "--dataset-option", "max_total_len=768", "--num-prompts", "48",
        "--max-regression", "output_throughput=15%",
    ],
    "prefix-cache-on-vs-off": [
        "--candidate", "enable_prefix_caching=true,kv_cache_memory=64MiB",
        "--reference", "enable_prefix_caching=false,kv_cache_memory=64MiB",
        "--dataset", "shared-prefix", "--dataset-option", "num_groups=4", "--dataset-option", "prompts_per_group=8",
        "--dataset-option", "system_prompt_len=1536", "--dataset-option", "question_len=32",
        "--dataset-option", "output_len=8", "--num-prompts", "32",
        "--max-regression", "output_throughput=15%,median_ttft=15%",
    ],
}


def gate_args(name: str, model: Path, extra: list[str]) -> list[str]:
    return ["gate", "--ratio", "--name", name, "--baseline", str(BASELINE), "--model", str(model), "--rounds", "2",
            *PAIRS[name], *extra]


def test_engine_ratios_hold(tiny_model, tmp_path):
    for name in PAIRS:
        result = CliRunner().invoke(main, gate_args(name, tiny_model, ["--summary", str(tmp_path / f"{name}.md")]))
        print(result.output)
        assert result.exit_code == 0, result.output


if __name__ == "__main__":
    from llmbench.modelbuild import build_model

    tiny = build_model("tiny")
    for pair in PAIRS:
        CliRunner().invoke(main, gate_args(pair, tiny, ["--update-baseline"]), catch_exceptions=False)
    print(BASELINE.read_text())
