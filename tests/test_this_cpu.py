"""`plan --gpu-spec this-cpu`: this machine's CPU as the device, only for a sweep its own server measured."""

import pytest
from click.testing import CliRunner

from llmbench.cli import main
from llmbench.machine import machine
from llmbench.plan.this_cpu import check_sweep


def test_a_sweep_of_a_server_on_this_machine_passes():
    check_sweep({"target": {"base_url": "http://127.0.0.1:8011"}, "machine": machine()})
    check_sweep({"target": {"base_url": "http://localhost:8000/v1"}, "machine": machine()})
    check_sweep({"target": {"base_url": "http://[::1]:8000"}})  # an older folder that kept no machine


def test_a_remote_server_or_another_machine_is_refused_with_what_differs():
    with pytest.raises(ValueError, match="http://10.0.0.7:8000, not on it"):
        check_sweep({"target": {"base_url": "http://10.0.0.7:8000"}, "machine": machine()})
    other = machine() | {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "isa": ["amx_bf16", "avx2"]}
    with pytest.raises(ValueError, match="Xeon.*plan it there"):
        check_sweep({"target": {"base_url": "http://127.0.0.1:8011"}, "machine": other})


def test_a_spec_that_is_neither_a_file_nor_this_cpu_is_a_cli_error(tmp_path):
    r = CliRunner().invoke(main, ["plan", "--qps", "5", "--gpu-spec", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "is not a file (a device JSON, or 'this-cpu')" in r.output
