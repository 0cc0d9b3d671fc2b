"""``rankflow info`` (issue #18): what a bug report needs (versions, devices, x64, the
compilation cache, thread settings), and a platform JAX cannot start as one line naming
the extra to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from rankflow import ConfigError, cli
from rankflow.engine import sysinfo

ROOT = Path(__file__).resolve().parents[2]


def test_info_reports_versions_devices_cache_and_threads(monkeypatch):
    monkeypatch.setenv("RANKFLOW_CACHE_DIR", "/somewhere/cache")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    d = sysinfo.info()
    assert d["versions"]["jax"] == jax.__version__
    assert [x["platform"] for x in d["devices"]] == [x.platform for x in jax.devices()]
    assert d["x64"] == jax.config.jax_enable_x64
    assert d["compilation_cache"] == "/somewhere/cache"
    assert d["cpu_devices"] == len(jax.devices("cpu"))
    text = sysinfo.format_info(d)
    assert f"jax {jax.__version__}," in text
    assert f"device 0: platform {jax.devices()[0].platform}, kind " in text
    assert "compilation cache: /somewhere/cache" in text
    assert "OMP_NUM_THREADS: 3" in text and "MKL_NUM_THREADS: (unset)" in text
    assert f"XLA_FLAGS: {os.environ.get('XLA_FLAGS', '(unset)')}" in text
    monkeypatch.setenv("RANKFLOW_CACHE_DIR", "off")
    assert "compilation cache: off" in sysinfo.format_info(sysinfo.info())


def test_info_json_is_the_mapping(capsys):
    assert cli.main(["info", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["backend"] == jax.default_backend() and d["devices"]


@pytest.mark.parametrize(
    "platforms, extra",
    [("tpu", "rankflow[tpu]"), ("cuda", "rankflow[cuda12]"), ("cpu,gpu", "rankflow[cuda13]")],
)
def test_a_platform_jax_cannot_start_names_the_extra(monkeypatch, platforms, extra):
    def fail():
        raise RuntimeError("Unable to initialize backend")

    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    monkeypatch.setattr(jax, "devices", fail)
    with pytest.raises(ConfigError, match=f"JAX_PLATFORMS={platforms}: JAX cannot start") as e:
        sysinfo.devices()
    assert extra in str(e.value) and "\n" not in str(e.value)
    # Without JAX_PLATFORMS the error is JAX's own, not a guess about platforms.
    monkeypatch.delenv("JAX_PLATFORMS")
    with pytest.raises(RuntimeError, match="Unable to initialize"):
        sysinfo.devices()


@pytest.mark.skipif(
    any(d.platform == "gpu" for d in jax.devices()), reason="needs a machine without a GPU"
)
def test_cuda_without_a_gpu_is_one_line_from_the_command():
    env = dict(os.environ, JAX_PLATFORMS="cuda", PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "rankflow.cli", "info"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("rankflow: error: JAX_PLATFORMS=cuda: JAX cannot start cuda")
    assert 'pip install "rankflow[cuda12]"' in res.stderr


def test_cpu_model_names_the_widest_vector_isa(tmp_path):
    """Float32 tables differ in their last bits between AVX2 and AVX-512 machines: the
    report names which one a bug came from."""
    from rankflow.engine.sysinfo import cpu_model

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse4_2 avx avx2\n")
    assert cpu_model(str(info)) == "Some CPU (avx2)"
    info.write_text("model name\t: Other\nflags\t\t: avx2 avx512f avx512bw\n")
    assert cpu_model(str(info)) == "Other (avx512f)"
    assert cpu_model(str(tmp_path / "missing")) != ""
