"""Exceptions raised by torchkiln (the names mirror ``torch._dynamo.exc``)."""
from __future__ import annotations


class TorchkilnException(RuntimeError):
    """Base class of every error torchkiln raises on purpose."""


class Unsupported(TorchkilnException):
    """Capture met something it cannot put in a graph.

    Without ``fullgraph=True`` this becomes a graph break; with it, the error reaches
    the user, naming the reason and the user's ``file:line``.
    """


class SkipFrame(Unsupported):
    """Capture gives up on the whole frame, which then runs eagerly (not a graph break):
    what torch.compile does when its root frame cannot break where the reason arose
    ("Failed to handle graph break gracefully. Skipping the function")."""


class BackendCompilerFailed(TorchkilnException):
    """The backend raised while compiling a captured graph (``suppress_errors=False``)."""

    def __init__(self, backend_name: str, inner: BaseException) -> None:
        self.backend_name = backend_name
        self.inner_exception = inner
        super().__init__(f"backend={backend_name!r} raised:\n{type(inner).__name__}: {inner}")


class RecompileError(TorchkilnException):
    """A recompile happened while ``config.error_on_recompile`` is set."""


class InternalTorchkilnError(TorchkilnException):
    """A bug in torchkiln itself."""
