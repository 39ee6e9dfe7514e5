"""Futures, Python tasks with dependencies, errors, interrupting a wait."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import ferry


def test_futures(rt):
    x = rt.array(np.arange(4, dtype=np.float64))
    f = rt.scal(x, 2.0, name="double it")
    assert f.result() is None
    assert f.done()
    assert f.name == "double it" and f.kernel == "scal" and f.device == "cpu"
    assert "cpu" in rt.explain(f)
    assert "pending" in repr(rt.scal(x, 1.0)) or True  # repr works whatever the timing
    g = rt.submit("dot", x, x)
    assert float(g) == pytest.approx(4 * (0 + 1 + 4 + 9))


def test_python_tasks_with_dependencies_run_in_order(rt):
    order = []

    @rt.task(writes=["y"])
    def produce(y, value: int):
        time.sleep(0.05)
        order.append("produce")
        y[:] = value

    @rt.task(reads=["y"], writes=["z"])
    def consume(y, z):
        order.append("consume")
        assert not y.flags.writeable  # inputs arrive read-only
        z[:] = y * 2

    @rt.task(reads=["z"], result=True)
    def total(z):
        return float(z.sum())

    y, z = rt.zeros(10, np.float64), rt.zeros(10, np.float64)
    produce(y, 3)
    consume(y, z)
    assert total(z).result() == 60.0
    assert order == ["produce", "consume"]
    np.testing.assert_array_equal(z.numpy(), np.full(10, 6.0))


def test_python_and_builtin_tasks_mix(rt):
    @rt.task(reads=["x", "y"], writes=["y"])
    def add_into(x, y):
        y += x

    x, y = rt.array(np.ones(100)), rt.zeros(100, np.float64)
    for _ in range(10):
        add_into(x, y)
        rt.axpy(x, y, 1.0)
    rt.wait()
    np.testing.assert_array_equal(y.numpy(), np.full(100, 20.0))


def test_python_task_exception_becomes_kernel_error_with_traceback(rt):
    @rt.task(reads=["x"])
    def broken(x):
        raise ValueError("bad value in " + str(x.shape))

    f = broken(rt.zeros(3))
    with pytest.raises(ferry.KernelError, match="bad value in \\(3,\\)") as info:
        f.result()
    assert "ValueError" in str(info.value)
    assert isinstance(info.value, ferry.FerryError)
    with pytest.raises(ferry.KernelError):
        rt.wait()
    assert rt.sum(rt.array(np.ones(2))) == 2.0  # still usable


def test_task_declaration_errors(rt):
    with pytest.raises(ferry.UsageError, match="'q' is not a parameter"):
        @rt.task(reads=["q"])
        def f(x):
            pass

    @rt.task(reads=["x"])
    def g(x, scale):
        pass

    with pytest.raises(ferry.UsageError, match="missing"):
        g(rt.zeros(2))


def test_redefining_a_task_in_a_notebook_cell_works(rt):
    for value in (1, 2):
        @rt.task(writes=["y"])
        def setter(y):
            y[:] = value

        y = rt.zeros(2)
        setter(y)
        np.testing.assert_array_equal(y.numpy(), [value, value])


def test_wait_timeout(rt):
    @rt.task(writes=["y"])
    def slow(y):
        time.sleep(0.5)

    f = slow(rt.zeros(1))
    with pytest.raises(TimeoutError):
        f.result(timeout=0.05)
    with pytest.raises(TimeoutError):
        rt.wait(timeout=0.05)
    f.result()


def test_ctrl_c_interrupts_a_wait_cleanly(rt):
    release = threading.Event()

    @rt.task(writes=["y"])
    def blocker(y):
        release.wait(10)
        y[:] = 1

    y = rt.zeros(4)
    f = blocker(y)
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        f.result()
    assert time.monotonic() - started < 5
    assert not f.done()  # the task goes on
    release.set()
    assert f.result() is None
    np.testing.assert_array_equal(y.numpy(), np.ones(4))


def test_runtime_context_manager_closes(rt):
    with ferry.Runtime(workers=1) as r:
        x = r.array(np.ones(3))
    assert r.closed
    with pytest.raises(ferry.UsageError, match="closed"):
        r.zeros(3)
    np.testing.assert_array_equal(x.numpy(), np.ones(3))  # arrays outlive their runtime


def test_trace_and_plot(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    with ferry.Runtime(workers=2, trace=True) as r:
        x = r.array(np.ones((64, 64)))
        c = r.zeros((64, 64), np.float64)
        for _ in range(4):
            r.gemm(x, x, c, 1.0, 1.0)
        r.wait()
        t = r.trace()
    assert len(t.tasks) == 4 and {s.kernel for s in t.tasks} == {"gemm"}
    assert all(s.end >= s.start for s in t.tasks)
    ax = t.plot()
    assert len(ax.patches) + len(ax.collections) >= 4
    ax.figure.savefig(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 1000
    t.save(str(tmp_path / "trace.json"))
    assert "traceEvents" in (tmp_path / "trace.json").read_text()


def test_plot_names_the_tasks_that_have_room():
    import time

    import matplotlib

    matplotlib.use("Agg")
    with ferry.Runtime(workers=1, trace=True) as r:
        @r.task(writes=["y"])
        def slow(y):
            time.sleep(0.05)

        y = r.zeros(3)
        slow(y)
        slow(y)
        r.wait()
        t = r.trace()
    ax = t.plot()
    names = [x.get_text() for x in ax.texts]
    assert sum(name.endswith("slow") for name in names) == 2, names


def test_plot_of_one_lane_keeps_its_title_inside_the_figure():
    import matplotlib

    matplotlib.use("Agg")
    with ferry.Runtime(workers=1, trace=True) as r:
        r.fill(r.zeros(1000), 1.0).result()
        t = r.trace()
    ax = t.plot()
    figure = ax.figure
    figure.canvas.draw()
    title = ax.title.get_window_extent(figure.canvas.get_renderer())
    assert title.y1 <= figure.bbox.y1 and title.y0 >= 0, (title, figure.bbox)


def test_trace_needs_tracing(rt):
    with pytest.raises(ferry.UsageError, match="trace=True"):
        rt.trace()


def test_a_script_with_a_task_ends_without_leak_warnings(tmp_path):
    # The task's function refers to the module's globals (the runtime, the
    # task): a cycle through C++ that the runtime breaks when it closes at exit.
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import ferry
        rt = ferry.Runtime(workers=1)

        @rt.task(writes=["y"])
        def fill7(y):
            y[:] = 7

        y = rt.zeros(3)
        fill7(y).result()
        assert (y.numpy() == 7).all()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr, done.stderr


SHUTDOWN_SCRIPT = r"""
import sys, numpy as np, ferry
raise_it = sys.argv[1] == "raise"
with ferry.Runtime(workers=1, gpus="none", read_environment=False, persist_perf_models=False) as rt:
    y = rt.zeros(4, np.float64)

    @rt.task(writes=["y"])
    def boom(y):
        raise RuntimeError("disk on fire")

    f = boom(y)
    if raise_it:
        try:
            f.result()
        except ferry.KernelError:
            print("raised")
"""


@pytest.mark.parametrize("raised", [True, False])
def test_the_shutdown_warning_is_only_for_a_failure_nothing_raised(raised):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SHUTDOWN_SCRIPT, "raise" if raised else "keep"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    warned = "no wait() reported it" in done.stdout + done.stderr
    assert warned != raised, done.stdout + done.stderr
