"""The package ships the CUDA module (libferry_cuda.so) beside Ferry's core
libraries in ferry/lib, and imports and runs without it."""
import os
import pathlib
import subprocess
import sys

import ferry


def test_cuda_module_lies_beside_the_core_libraries():
    lib = pathlib.Path(ferry.__file__).parent / "lib"
    assert (lib / "libferry_common.so").exists()
    assert (lib / "libferry_cuda.so").exists() == ferry.with_cuda


def test_imports_and_runs_with_the_module_hidden(tmp_path):
    hidden = tmp_path / "libferry_cuda.so"
    env = dict(os.environ, FERRY_CUDA_MODULE=str(hidden), FERRY_GPUS="all")
    code = (
        "import ferry, numpy as np\n"
        "rt = ferry.Runtime()\n"
        "print(ferry.cuda_device_count())\n"
        "print(ferry._ferry.cuda_unavailable_reason())\n"
        "print(rt)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    count, reason, runtime = run.stdout.splitlines()[:3]
    assert count == "0"
    if ferry.with_cuda:
        assert "not found" in reason and str(hidden) in reason, reason
    assert "cuda:" not in runtime, runtime
