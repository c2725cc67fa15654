"""The house's arrows: which package may import which (README, "How it is built"), and no import cycles.

Every import counts, including those inside functions: a lazy import is still a dependency.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bundled", "engine", "llmbench")

# package -> packages it must never import (a prefix matches its subpackages)
FORBIDDEN = {
    "bundled": ("engine", "llmbench"),
    "engine": ("llmbench",),
    "llmbench": ("engine",),
    "engine.kernels": ("engine.layers", "engine.models", "engine.attention", "engine.serve", "engine.spec",
                       "engine.quant", "engine.llm", "engine.model_runner", "engine.scheduler"),
    "engine.attention": ("engine.layers", "engine.models", "engine.serve", "engine.spec", "engine.quant",
                         "engine.llm", "engine.model_runner", "engine.scheduler"),
    "engine.layers": ("engine.models", "engine.serve", "engine.spec", "engine.llm", "engine.model_runner",
                      "engine.scheduler"),
    "engine.models": ("engine.serve", "engine.spec", "engine.quant", "engine.llm", "engine.model_runner",
                      "engine.scheduler"),
    "engine.spec": ("engine.serve", "engine.llm"),
    "engine.quant": ("engine.serve",),
}
CORE = ("engine.config", "engine.sequence", "engine.block_manager", "engine.scheduler", "engine.sampler",
        "engine.loader", "engine.stats", "engine.detokenizer", "engine.model_runner", "engine.step_inputs",
        "engine.cuda_graphs", "engine.llm")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module this file imports (absolute names, at any depth of the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    edges = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports(path):
            while imported and imported not in modules:  # `from pkg import name` names an attribute
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        edges[name] = targets
    return edges


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in edges.items():
        rules = [banned for pkg, banned in FORBIDDEN.items() if within(source, pkg)]
        for target in targets:
            if any(within(target, b) for banned in rules for b in banned):
                wrong.append(f"{source} imports {target}")
            if within(target, "engine.serve") and not within(source, "engine.serve"):
                wrong.append(f"{source} imports the server ({target}); only the server stands on it")
    return sorted(wrong)


def test_no_import_against_the_arrows():
    wrong = violations(graph())
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    edges = graph()
    # `engine/__init__` re-exports LLM for users; its own submodules never import it, so it is left out.
    edges = {k: {t for t in v if t != "engine"} for k, v in edges.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [node, nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(cycles)


def test_the_engine_core_reads_like_a_table_of_contents():
    top = sorted(p.stem for p in (ROOT / "engine").glob("*.py") if p.stem != "__init__")
    assert top == sorted(m.split(".")[1] for m in CORE), top
    folders = sorted(p.name for p in (ROOT / "engine").iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders == ["attention", "kernels", "layers", "models", "quant", "serve", "spec"]


def test_the_checks_catch_a_wrong_import():
    """The arrows are enforced, not just listed."""
    planted = {"engine.model_runner": {"llmbench.metrics"}, "llmbench.sweep": {"engine.llm"},
               "engine.kernels.cache_write": {"engine.layers.attention"}, "engine.llm": {"engine.serve.server"},
               "bundled.modelbuild": {"llmbench.datasets"}, "llmbench.runner": {"bundled.sharegpt"}}
    assert violations(planted) == [
        "bundled.modelbuild imports llmbench.datasets", "engine.kernels.cache_write imports engine.layers.attention",
        "engine.llm imports the server (engine.serve.server); only the server stands on it",
        "engine.model_runner imports llmbench.metrics", "llmbench.sweep imports engine.llm"]


def test_engine_exports_the_vllm_names():
    import engine

    assert {"LLM", "SamplingParams", "EngineConfig"} <= set(engine.__all__)
    from engine import LLM, SamplingParams  # noqa: F401
