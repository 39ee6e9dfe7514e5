"""GPU paths from Python: CuPy and PyTorch arrays through DLPack, CUDA source
kernels on a local GPU. Marked gpu; skipped, saying why, without a GPU."""

import numpy as np
import pytest

import ferry

from conftest import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

SCALE = r"""
extern "C" __global__ void scale(float* x, long long n, float a) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""


def test_cupy_array_crosses_in_and_back():
    cupy = pytest.importorskip("cupy")
    with ferry.Runtime(workers=2) as rt:
        d = cupy.arange(1000, dtype=cupy.float32)
        a = rt.from_dlpack(d)
        rt.scal(a, 2.0).result()
        np.testing.assert_array_equal(a.numpy(), 2 * np.arange(1000, dtype=np.float32))
        back = cupy.asarray(a.numpy())
        assert float(back.sum()) == pytest.approx(2 * 999 * 1000 / 2)


def test_torch_cuda_tensor_crosses_in():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    with ferry.Runtime(workers=2) as rt:
        t = torch.arange(64, dtype=torch.float64, device="cuda").reshape(8, 8)
        a = rt.from_dlpack(t)
        assert a.shape == (8, 8)
        np.testing.assert_array_equal(a.numpy(), np.arange(64, dtype=np.float64).reshape(8, 8))


def test_gemm_on_the_gpu_matches_numpy():
    with ferry.Runtime(workers=2) as rt:
        a_np = np.random.default_rng(1).random((512, 512)).astype(np.float32)
        a, c = rt.array(a_np), rt.zeros((512, 512), np.float32)
        f = rt.gemm(a, a, c, on="gpu")
        f.result()
        assert f.device.startswith("cuda:")
        np.testing.assert_allclose(c.numpy(), a_np @ a_np, rtol=1e-3)


def test_cuda_source_kernel_runs_on_the_local_gpu():
    with ferry.Runtime(workers=2) as rt:
        k = rt.cuda_kernel(SCALE, "scale")
        x = rt.array(np.arange(1000, dtype=np.float32))
        f = k(x, x.size, 0.5, on="gpu")
        f.result()
        np.testing.assert_allclose(x.numpy(), 0.5 * np.arange(1000, dtype=np.float32))


def test_cuda_source_compile_error_carries_the_log():
    with ferry.Runtime(workers=2) as rt:
        k = rt.cuda_kernel('extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }', "broken")
        with pytest.raises(ferry.FerryError, match="undefined_name"):
            k(rt.zeros(1), on="gpu", grid=1, block=1).result()


def test_a_strided_cuda_tensor_is_refused_naming_its_strides():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    with ferry.Runtime(workers=2, gpus="0") as rt:
        t = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4).t()  # strides (1, 4)
        with pytest.raises(ferry.UsageError, match=r"not C-contiguous .*strides \(1, 4\)") as refused:
            rt.from_dlpack(t)
        assert "CUDA GPU 0" in str(refused.value)
        a = rt.from_dlpack(t.contiguous())
        np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)
