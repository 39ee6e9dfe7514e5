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


@pytest.fixture
def rt():
    with ferry.Runtime(workers=2) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def server():
    with ferry.testing.local_server(workers=1) as s:
        yield s


def gpu_count() -> int:
    try:
        import cupy  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


requires_gpu = pytest.mark.skipif(gpu_count() == 0 or os.environ.get("FERRY_GPUS") == "none",
                                  reason="no CUDA GPU visible to CuPy or PyTorch on this machine")
