"""Shared fixtures: a runtime per test, and a ferryd on loopback per module
that needs one."""

import os

import pytest

import ferry
import ferry.testing


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, saying why, where there is none)")


@pytest.fixture(autouse=True)
def _no_user_perf_models(tmp_path, monkeypatch):
    # Tests must not read or grow the user's performance models.
    monkeypatch.setenv("FERRY_PERFMODEL_DIR", str(tmp_path / "perfmodels"))
    monkeypatch.delenv("FERRY_REMOTES", raising=False)


@pytest.fixture(autouse=True)
def _no_gpu_unless_marked(request, monkeypatch):
    # A runtime uses every GPU by default; a test uses none unless it is
    # marked gpu (it asks for one), so that the CPU suite creates no CUDA
    # context and runs the same on a GPU machine. gpu_reason() below reads
    # FERRY_GPUS at import, before this runs.
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("FERRY_GPUS", "none")


@pytest.fixture(scope="module")
def tiny_tile_runtime():
    """A runtime for a ferry.numpy test module, with tiles of 256 bytes: every
    multi-tile path runs on small arrays. Module-wide, so before the per-test
    perf-model folder above: its models stay in memory."""
    import ferry.numpy as fnp
    from ferry.numpy._tiles import DEFAULT_TILE_BYTES

    with ferry.Runtime(workers=2, persist_perf_models=False) as runtime, fnp.using(runtime):
        fnp.set_options(tile_bytes=256)
        yield runtime
        fnp.set_options(tile_bytes=DEFAULT_TILE_BYTES)


@pytest.fixture(scope="module", params=["eager", "fused"])
def eager_and_fused_runtime(request):
    """tiny_tile_runtime twice: small arrays computed at once with NumPy
    (the eager path), then every one through fused programs on tiny tiles
    (eager_bytes=0), so both paths face the same checks."""
    import ferry.numpy as fnp
    from ferry.numpy._tiles import DEFAULT_TILE_BYTES

    with ferry.Runtime(workers=2, persist_perf_models=False) as runtime, fnp.using(runtime):
        fnp.set_options(tile_bytes=256, eager_bytes=0 if request.param == "fused" else None)
        yield runtime
        fnp.set_options(tile_bytes=DEFAULT_TILE_BYTES, eager_bytes=None)


@pytest.fixture
def rt():
    with ferry.Runtime(workers=2, gpus="none") as runtime:
        yield runtime


@pytest.fixture(scope="module")
def server():
    with ferry.testing.local_server(workers=1) as s:
        yield s


def gpu_reason() -> str:
    if os.environ.get("FERRY_GPUS") == "none":
        return "FERRY_GPUS=none"
    if ferry.cuda_device_count() == 0:
        return "no CUDA GPU: " + (ferry._ferry.cuda_unavailable_reason() or "none found")
    return ""


requires_gpu = pytest.mark.skipif(bool(gpu_reason()), reason=gpu_reason() or "GPU present")
