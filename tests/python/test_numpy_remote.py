"""ferry.numpy expressions through a real ferryd (ferry.testing.local_server):
the fused kernel is a built-in, so a CPU ferryd runs it too."""

import numpy as np

import ferry
import ferry.numpy as fnp
from ferry.numpy._tiles import DEFAULT_TILE_BYTES


def test_fused_expressions_run_on_a_remote_ferryd(server):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((300, 20)).astype(np.float32)
    w_np = rng.standard_normal((20, 5)).astype(np.float32)
    with ferry.Runtime(remotes=[server.address], token=server.token, workers=1) as rt:
        with fnp.using(rt, on="remote"):
            fnp.set_options(tile_bytes=4096, on="remote")
            try:
                x = fnp.asarray(x_np)
                y = fnp.tanh(x * 2 - 1) + fnp.exp(-fnp.abs(x))
                np.testing.assert_allclose(y.numpy(), np.tanh(x_np * 2 - 1) + np.exp(-np.abs(x_np)),
                                           rtol=1e-6, atol=1e-6)
                assert "remote:" in fnp.explain(y)
                total = fnp.sum(fnp.maximum(x @ fnp.asarray(w_np), 0), axis=0)
                np.testing.assert_allclose(total.numpy(), np.maximum(x_np @ w_np, 0).sum(axis=0), rtol=1e-4)
                remote_random = fnp.random.default_rng(5).random((50, 4)).numpy()
            finally:
                fnp.set_options(tile_bytes=DEFAULT_TILE_BYTES, on=None)
        assert rt.remote_stats(server.address)["server_tasks"] > 0
    # The same generator gives the same numbers on this machine's CPU workers.
    with ferry.Runtime(workers=1) as rt, fnp.using(rt):
        local = fnp.random.default_rng(5).random((50, 4)).numpy()
    np.testing.assert_array_equal(local, remote_random)
