"""The target of a run: any OpenAI-compatible server, or the bundled engine started as a subprocess (and
always stopped after); what it serves, its tokenizer, and how it reports its configuration."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.scrape import vllm_kv_pool


class TargetError(RuntimeError):
    """Something the user must fix (bad URL, unknown model, unusable tokenizer); one line, no traceback."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BundledEngine:
    """`python -m engine.serve` on a free 127.0.0.1 port; a context manager that always stops it."""

    def __init__(self, model: str | None = None, flags: dict | None = None, log_path: Path | None = None,
                 startup_timeout: float = 600.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "engine.serve", "--port", str(self.port), "--log-level", "warning"]
        if model:
            args += ["--model", model]
        for key, value in (flags or {}).items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            elif value is not None:
                args += [flag, str(value)]
        self.args, self.log_path, self.startup_timeout = args, log_path, startup_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> BundledEngine:
        """Start it in its own session, so a Ctrl-C meant for llmbench reaches the engine only as our SIGTERM."""
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") if self.log_path else open(os.devnull, "w") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
                                         start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:] if self.log_path else ""
                raise TargetError(f"the bundled engine exited during start-up (code {self.proc.returncode}): {tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise TargetError(f"the bundled engine did not become healthy within {self.startup_timeout:.0f} s")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def model_dir(self) -> str:
        with urllib.request.urlopen(self.url + "/v1/models", timeout=10) as resp:
            return json.load(resp)["data"][0]["root"]


@dataclass
class Target:
    base_url: str
    model: str
    tokenizer_dir: str | None
    bundled: bool
    server_info: dict = field(default_factory=dict)


def _get_text(url: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


def _get_json(url: str, api_key: str | None = None, timeout: float = 10.0) -> dict:
    return json.loads(_get_text(url, api_key, timeout))


@contextlib.contextmanager
def open_target(base_url: str | None, model: str | None, engine_flags: dict | None, log: Path | None = None,
                api_key: str | None = None) -> Iterator[Target]:
    """Yield a reachable target; with no base URL, a bundled engine started for the duration (its output to
    `log`)."""
    if base_url is None:
        with BundledEngine(model, engine_flags, log) as engine:
            yield describe_target(engine.url, None, api_key, bundled=True)
        return
    yield describe_target(base_url.rstrip("/"), model, api_key, bundled=False)


def describe_target(base_url: str, model: str | None, api_key: str | None, bundled: bool) -> Target:
    try:
        listed = _get_json(base_url + "/v1/models", api_key)
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise TargetError(f"{base_url}/v1/models answered HTTP {err.code}: the server wants an API key"
                              + (" other than the one given" if api_key else "")
                              + " (--api-key KEY or OPENAI_API_KEY; vLLM's own is its --api-key)") from None
        raise TargetError(f"{base_url}/v1/models answered HTTP {err.code}: is this an OpenAI-compatible server?"
                         ) from None
    except (urllib.error.URLError, OSError) as err:
        raise TargetError(f"cannot reach {base_url}: {getattr(err, 'reason', err)}") from None
    entries = listed.get("data") or []
    names = [m.get("id") for m in entries]
    if model is None:
        if not names:
            raise TargetError(f"{base_url}/v1/models lists no model; pass --model")
        model = names[0]
    elif names and model not in names:
        raise TargetError(f"model {model!r} is not served by {base_url} (it serves: {', '.join(names)})")
    root = next((m.get("root") for m in entries if m.get("id") == model), None)
    info: dict = {"models": entries}
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
        info["version"] = _get_json(base_url + "/version", api_key)
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
        pool = vllm_kv_pool(_get_text(base_url + "/metrics", api_key))
        if pool:
            info["kv_pool"] = pool
    tokenizer_dir = root if root and Path(root).is_dir() else (model if Path(model).is_dir() else None)
    return Target(base_url, model, tokenizer_dir, bundled, info)


# vLLM (with VLLM_SERVER_DEV_MODE=1) and the bundled engine; SGLang
RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")


def reset_prefix_cache(target: Target, api_key: str | None = None) -> str | None:
    """Ask the server to drop its prefix cache before a measurement, so a rate does not find the prompts an
    earlier rate sent (a sweep sends the same seeded sample at every rate). None when done, else why not."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for path in RESET_PATHS:
        req = urllib.request.Request(target.base_url + path, data=b"", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30):
                return None
        except urllib.error.HTTPError as err:
            if err.code not in (404, 405):
                return f"{path} answered HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            return f"{path}: {getattr(err, 'reason', err)}"
    return "the server has neither /reset_prefix_cache (vLLM: set VLLM_SERVER_DEV_MODE=1) nor /flush_cache (SGLang)"


def load_tokenizer(path: str | None, target: Target) -> tuple[object, str, bool]:
    """(tokenizer, its folder, whether it is the bundled model's stand-in): the target model's tokenizer
    from a local folder, or the bundled model's when the target's is not on this machine."""
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = path or target.tokenizer_dir
    fallback = path is None
    if fallback:
        from bundled.modelbuild import build_model

        path = str(build_model())
    try:
        return AutoTokenizer.from_pretrained(path), path, fallback
    except (OSError, ValueError) as err:
        raise TargetError(f"cannot load a tokenizer from {path}: {err}") from None


def quantization_mode(config: dict | None) -> str:
    """Weights and KV-cache format as the target reported them (the bundled engine's /version)."""
    if not config:
        return "not reported"
    info = config.get("quantization_info") or {}
    weights = config.get("quantization") or info.get("method") or config.get("dtype", "?")
    if info:
        weights += f" ({info['bits']}-bit, {info['path']} kernels)"
    return f"weights {weights}, KV cache {config.get('kv_cache_dtype', 'auto')}"
