"""Configuration objects with ``.patch()``, one per subsystem.

``torchkiln.config`` is the capture configuration (it mirrors ``torch._dynamo.config``);
``torchkiln.aot.config`` and ``torchkiln.codegen.config`` are built from the same
:class:`Config` class.  ``patch`` works as a context manager and as a decorator of
functions and classes, and takes ``("name", value)``, ``{"name": value}`` or
``name=value``, as torch's config modules do.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any


class Config:
    """A flat namespace of named settings with defaults.

    Unknown names raise ``AttributeError`` on read and on write, so a typo in a
    ``patch`` is an error rather than a silently ignored setting.
    """

    def __init__(self, name: str, **defaults: Any) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_defaults", dict(defaults))
        # Settings live in the instance __dict__ (plain attribute reads on the hot path,
        # and tools that save and restore instance attributes, such as pytest's
        # monkeypatch since 9.2, see and restore them).
        self.__dict__.update(defaults)

    def __getattr__(self, key: str) -> Any:  # only reached for a name that is not a setting
        raise AttributeError(f"{object.__getattribute__(self, '_name')} has no setting {key!r}")

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in self._defaults:
            raise AttributeError(f"{self._name} has no setting {key!r}")
        self.__dict__[key] = value

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{self._name}: settings cannot be deleted ({key!r}); use reset()")

    def __dir__(self):
        return sorted(self._defaults)

    def to_dict(self) -> dict[str, Any]:
        """A copy of every setting, e.g. for a cache key."""
        return {k: self.__dict__[k] for k in self._defaults}

    def reset(self) -> None:
        """Restore every setting to its default."""
        self.__dict__.update(self._defaults)

    def patch(self, arg1: Any = None, arg2: Any = None, **kwargs: Any) -> "_Patch":
        """Temporarily change settings; a context manager and a decorator."""
        if isinstance(arg1, str):
            changes = {arg1: arg2}
        elif isinstance(arg1, dict):
            changes = dict(arg1)
        elif arg1 is None:
            changes = {}
        else:
            raise TypeError(f"patch() takes a name and value, a dict or keywords, not {arg1!r}")
        changes.update(kwargs)
        for key in changes:
            if key not in self._defaults:
                raise AttributeError(f"{self._name} has no setting {key!r}")
        return _Patch(self, changes)


class _Patch(contextlib.ContextDecorator):
    def __init__(self, config: Config, changes: dict[str, Any]) -> None:
        self.config = config
        self.changes = changes
        self.saved: list[dict[str, Any]] = []

    def __enter__(self):
        self.saved.append({k: getattr(self.config, k) for k in self.changes})
        for k, v in self.changes.items():
            setattr(self.config, k, v)
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.pop().items():
            setattr(self.config, k, v)
        return False

    def __call__(self, obj):
        if inspect.isclass(obj):
            # Patch every test-like method, and setUp/tearDown, as torch's does.
            for name, attr in list(vars(obj).items()):
                if callable(attr) and (name.startswith("test") or name in ("setUp", "tearDown")):
                    setattr(obj, name, self(attr))
            return obj
        patch = self

        @functools.wraps(obj)
        def wrapper(*args, **kwargs):
            with _Patch(patch.config, patch.changes):
                return obj(*args, **kwargs)

        return wrapper


# Capture (TorchDynamo-equivalent) settings.  Names and defaults follow
# torch._dynamo.config where the setting exists there.
config = Config(
    "torchkiln.config",
    cache_size_limit=8,
    accumulated_cache_size_limit=256,
    error_on_recompile=False,
    assume_static_by_default=True,
    automatic_dynamic_shapes=True,
    specialize_int=False,
    capture_scalar_outputs=False,
    capture_dynamic_output_shape_ops=False,
    suppress_errors=True,
    verbose=False,
    compiled_autograd=False,
    skip_nnmodule_hook_guards=True,
    guard_nn_modules=False,
    force_parameter_static_shapes=True,
    inline_inbuilt_nn_modules=True,
    raise_on_ctx_manager_usage=True,
    recompile_limit=8,
    # torchkiln's own: instructions one capture may trace (inlined calls included); past
    # it the frame runs eagerly (an enormous loop is not traced for minutes)
    trace_step_limit=300_000,
    optimize_ddp=True,
    # nn.RNN/GRU/LSTM modules on CUDA are a graph break (they run eagerly on cuDNN's
    # fused kernel), as torch._dynamo.config.allow_rnn=False; on CPU they are captured
    allow_rnn=False,
)
