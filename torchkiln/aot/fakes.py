"""Fake inputs for tracing: capture's ``meta["example_value"]`` fakes when present
(their ShapeEnv holds the symbolic sizes), else fresh fakes from the real inputs."""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .rnn import TrainingLSTM


def fake_mode_of(values) -> Optional[FakeTensorMode]:
    for v in values:
        if isinstance(v, FakeTensor):
            return v.fake_mode
    return None


def _active_fake_mode() -> Optional[FakeTensorMode]:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, FakeTensorMode):
            return mode
    return None


def shape_env_of(val):
    """The ShapeEnv of the first symbolic value or fake tensor in pytree ``val`` (or None)."""
    for leaf in torch.utils._pytree.tree_leaves(val):
        if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return leaf.node.shape_env
        if isinstance(leaf, FakeTensor):
            return leaf.fake_mode.shape_env
    return None


def _matches(fake, real) -> bool:
    if not isinstance(real, torch.Tensor):
        return True
    if not isinstance(fake, torch.Tensor):
        return False
    try:
        return (tuple(_hint(s) for s in fake.shape) == tuple(real.shape)
                and fake.dtype == real.dtype and fake.requires_grad == real.requires_grad)
    except Exception:
        return False


def _hint(s):
    return s.node.hint if isinstance(s, torch.SymInt) else s


def make_fake_inputs(args: list, example_values: Optional[list] = None, dynamic: bool = False):
    """``(fake_mode, fake_args)`` for ``args``.

    An example value (capture's placeholder fake) that describes its argument is used
    as it is; any other real tensor becomes a fake in the fake mode found on the example
    values or inputs, the active fake mode, or a new one (static sizes unless
    ``dynamic``).  SymInt example values stand for int arguments.
    """
    evs = example_values if example_values is not None and len(example_values) == len(args) else [None] * len(args)
    mode = fake_mode_of(evs) or fake_mode_of(args) or _active_fake_mode()
    if mode is None:
        # a ShapeEnv also for static sizes: .item() and nonzero() make unbacked symbols in it
        mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    fakes = []
    for a, ev in zip(args, evs):
        if isinstance(a, torch.Tensor) and isinstance(ev, FakeTensor) and ev.fake_mode is mode and _matches(ev, a):
            fakes.append(ev)
        elif isinstance(ev, torch.SymInt) and not isinstance(a, torch.Tensor):
            fakes.append(ev)
        elif isinstance(a, FakeTensor) or not isinstance(a, torch.Tensor):
            fakes.append(a)
        else:
            fakes.append(mode.from_tensor(a, static_shapes=not dynamic))
    return mode, fakes


def tracing_context(fake_mode, joint: bool = False):
    """Where analysis and tracing run: the fake mode active (factory calls make fakes),
    the Python dispatcher on (symbolic sizes through decompositions), real tensors the
    function closes over allowed (they become graph constants).

    ``joint``: LSTMs become oneDNN layers with a workspace (:mod:`.rnn`); otherwise
    oneDNN is off, so other RNNs go through their generic ATen composite (torch's LSTM
    decomposition would pick the oneDNN kernel in inference mode, without workspace,
    whenever the *input* needs no grad, even if the weights do).
    """
    stack = contextlib.ExitStack()
    if hasattr(fake_mode, "epoch"):
        # fake inputs forget memoised .item()/nonzero() symbols: each trace makes its own
        fake_mode.epoch += 1
    stack.enter_context(fake_mode)
    stack.enter_context(enable_python_dispatcher())
    if joint:
        stack.callback(torch._C._set_mkldnn_enabled, torch._C._get_mkldnn_enabled())
        torch._C._set_mkldnn_enabled(False)
        stack.enter_context(TrainingLSTM())
    # Real tensors closed over by the function (constants) become graph constants.
    old = fake_mode.allow_non_fake_inputs
    fake_mode.allow_non_fake_inputs = True
    stack.callback(setattr, fake_mode, "allow_non_fake_inputs", old)
    return stack
