"""Ferry's exceptions. Every error Ferry raises is a FerryError; the
subclasses say what went wrong, and some also derive from the built-in
exception a Python programmer would catch for that kind of problem."""


class FerryError(RuntimeError):
    """Anything Ferry raises."""


class UsageError(FerryError, ValueError):
    """The API was used wrongly (bad argument, wrong dtype or shape, unknown
    kernel). Raised before anything runs; the runtime keeps working."""


class OutOfMemory(FerryError, MemoryError):
    """A memory request could not be met."""


class KernelError(FerryError):
    """A task failed, or could not run because a task it depends on failed.
    The message names the task and its kernel (and, for Python tasks, carries
    the Python traceback)."""


class ProtocolError(FerryError):
    """A peer sent a message that breaks Ferry's protocol."""


class RemoteError(FerryError):
    """A remote GPU host refused or failed a request, or went away."""


class TransportError(FerryError):
    """The network transport (UCX) failed."""


class CudaError(FerryError):
    """A CUDA call failed."""


class CompileError(UsageError):
    """CUDA source did not compile; `log` holds the compiler's output."""

    @property
    def log(self) -> str:
        return str(self)
