"""A remote run through ferry.testing.local_server(): a real ferryd on loopback."""

import numpy as np
import pytest

import ferry


def test_remote_run_through_local_server(server):
    with ferry.Runtime(remotes=[server.address], token=server.token, workers=1) as rt:
        assert any(d["kind"] == "remote" for d in rt.devices())
        x = rt.array(np.arange(1000, dtype=np.float64))
        y = rt.zeros(1000, np.float64)
        f = rt.axpy(x, y, 2.0, on="remote")
        f.result()
        assert f.device.startswith("remote:")
        np.testing.assert_array_equal(y.numpy(), 2 * np.arange(1000))
        a = rt.array(np.eye(32))
        c = rt.zeros((32, 32), np.float64)
        rt.gemm(a, a, c, on="remote")
        np.testing.assert_array_equal(c.numpy(), np.eye(32))
        stats = rt.remote_stats(server.address)
        assert stats["connected"] and stats["server_tasks"] >= 2 and stats["bytes_shipped"] > 0
        assert "remote" in rt._repr_html_()


def test_python_tasks_never_go_remote(server):
    with ferry.Runtime(remotes=[server.address], token=server.token, workers=1) as rt:
        @rt.task(writes=["y"])
        def local_only(y):
            y[:] = 7

        y = rt.zeros(3)
        assert local_only(y).device == "cpu"
        np.testing.assert_array_equal(y.numpy(), [7, 7, 7])
        with pytest.raises(ferry.UsageError):
            local_only(rt.zeros(3), on="remote")


def test_wrong_token_leaves_the_program_working(server):
    # The refusal is logged by name; the tasks run on the CPU instead.
    with ferry.Runtime(remotes=[server.address], token="not-the-token", workers=1) as rt:
        x = rt.zeros(4)
        rt.fill(x, 1.0).result()
        np.testing.assert_array_equal(x.numpy(), np.ones(4))
        assert not rt.remote_stats(server.address)["connected"]
