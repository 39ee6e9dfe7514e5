"""CUDA source kernels: what is checked before anything runs works on any
machine (the signature is read from the source); running them is in
test_gpu.py."""

import numpy as np
import pytest

import ferry

SCALE = r"""
extern "C" __global__ void scale(float* x, long long n, float a) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""


def test_signature_becomes_the_parameter_list(rt):
    k = rt.cuda_kernel(SCALE, "scale")
    params = k.kernel.info["params"]
    assert [(p["name"], p["kind"]) for p in params[:3]] == [("x", "array"), ("n", "integer"), ("a", "real")]
    assert params[0]["mode"] == "readwrite" and params[0]["dtypes"] == ["float32"]
    assert k.kernel.info["cuda"] and not k.kernel.info["cpu"]


def test_writes_makes_a_pointer_write_only(rt):
    k = rt.cuda_kernel(SCALE, "scale", writes=["x"])
    assert k.kernel.info["params"][0]["mode"] == "write"


def test_unsupported_parameter_type_is_named(rt):
    with pytest.raises(ferry.UsageError, match="'x' has type 'std::complex<float>\\*'"):
        rt.cuda_kernel('extern "C" __global__ void f(std::complex<float>* x) {}', "f")


def test_missing_entry_lists_the_kernels_there_are(rt):
    with pytest.raises(ferry.UsageError, match="no __global__ function named 'nope'; its kernels: scale"):
        rt.cuda_kernel(SCALE, "nope")


def test_wrong_dtype_and_bad_launch_are_refused_before_running(rt):
    k = rt.cuda_kernel(SCALE, "scale")
    with pytest.raises(ferry.UsageError, match="element type float64"):
        k(rt.zeros(4, np.float64), 4, 1.0)
    with pytest.raises(ferry.UsageError, match="grid and block"):
        k(rt.zeros(4), 4, 1.0, block=(0,))


@pytest.mark.skipif(ferry.cuda_device_count() > 0, reason="this machine has a GPU: the kernel would run")
def test_without_a_gpu_anywhere_it_says_no_device_can_run_it(rt):
    k = rt.cuda_kernel(SCALE, "scale")
    with pytest.raises(ferry.UsageError, match="no device of this runtime can run it"):
        k(rt.zeros(4), 4, 2.0)
