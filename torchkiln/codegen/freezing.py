"""Freezing: module state as constants in ``no_grad`` inference (``codegen.config.freezing``).

Mirrors ``torch._inductor.config.freezing`` (off by default, as torch's).  With it on,
a graph compiled while grad mode is off treats the parameters and buffers of the
compiled module as constants of the inference graph:

1. their placeholders are replaced by the tensors themselves (``get_attr``);
2. constant folding: an op whose inputs are all constants runs once at compile time
   (not random ops, not ops whose result is larger than their largest input, e.g. an
   ``expand`` materialized);
3. a per-output-channel ``mul``/``add``/``sub`` by a constant right after a
   convolution (batch norm in eval mode, once step 2 folded its statistics) is folded
   into the convolution's weight and bias;
4. a 2-d float32 convolution with a constant weight and static input sizes runs as
   ``mkldnn._convolution_pointwise`` with the weight reordered once into oneDNN's
   blocked format (``mkldnn._reorder_convolution_weight``: the per-call weight
   reorder was most of the time of deep, small-spatial convolutions: 1.48 ms vs
   0.43 ms at 256 channels 2x2), with a following ReLU fused as its post-op.

As torch's: a parameter changed after compiling (in place or replaced) is not seen by
the compiled graph (folded and packed values are copies); compile again
(``torchkiln.reset()``) after changing weights.  Graphs compiled with grad mode on
(training) are never frozen.  Frozen graphs bypass the FX graph cache (their
constants are not part of its key).
"""
from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def frozen_flat_inputs(gm: torch.fx.GraphModule, example_inputs) -> list[int]:
    """Positions in ``example_inputs`` holding module state: parameters, and tensors
    captured as attributes of ``L['self']`` (buffers such as batch-norm statistics)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(value, torch.Tensor):
            continue
        source = str(node.meta.get("source", ""))
        if isinstance(value, torch.nn.Parameter) or (source.startswith("L['self'].") and not value.requires_grad):
            out.append(i)
    return out


def freeze(gm: torch.fx.GraphModule, constants: dict[int, torch.Tensor]) -> torch.fx.GraphModule | None:
    """A copy of the ATen inference graph ``gm`` with placeholder ``i`` (in order) bound
    to ``constants[i]``, folded and with packed convolutions; None when the
    placeholders do not match the constants (then nothing is frozen)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    frozen = torch.fx.GraphModule(gm, graph)  # its forward is the unfrozen code (eager fallback)
    placeholders = [n for n in frozen.graph.nodes if n.op == "placeholder"]
    for i, value in constants.items():
        if i >= len(placeholders):
            return None
        val = placeholders[i].meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(value.shape) or val.dtype != value.dtype:
            return None
    counter = [0]

    def const(value: torch.Tensor, before) -> torch.fx.Node:
        name = f"_frozen_{counter[0]}"
        counter[0] += 1
        frozen.register_buffer(name, value.detach(), persistent=False)
        with frozen.graph.inserting_before(before):
            node = frozen.graph.get_attr(name)
        node.meta["frozen"] = value
        return node

    first = next(n for n in frozen.graph.nodes if n.op != "placeholder")
    for i, value in constants.items():
        ph = placeholders[i]
        if ph.users:
            ph.replace_all_uses_with(const(value, first))
    _fold_constants(frozen, const)
    while _fold_affine_into_conv(frozen, const):
        pass
    _pack_convolutions(frozen)
    frozen.graph.eliminate_dead_code()
    return frozen


def _value(node):
    return node.meta.get("frozen") if isinstance(node, torch.fx.Node) else None


def _fold_constants(gm, const) -> None:
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in node.target.tags or not node.all_input_nodes:
            continue
        if not all(_value(n) is not None for n in node.all_input_nodes):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _value)
        try:
            result = node.target(*args, **kwargs)
        except Exception:
            continue
        if not isinstance(result, torch.Tensor):
            continue
        if result.numel() > max(_value(n).numel() for n in node.all_input_nodes):
            continue
        node.replace_all_uses_with(const(result, node))
        gm.graph.erase_node(node)


def _channel_vector(c: torch.Tensor, channels: int):
    """``c`` as one value per output channel of an NCHW result, or None when it varies
    along other dims (or broadcasts otherwise)."""
    if c.dim() > 4:
        return None
    shape = [1] * (4 - c.dim()) + list(c.shape)
    if shape[0] != 1 or shape[2] != 1 or shape[3] != 1 or shape[1] not in (1, channels):
        return None
    return c.reshape(-1).expand(channels)


def _fold_affine_into_conv(gm, const) -> bool:
    for conv in gm.graph.nodes:
        if conv.target is not aten.convolution.default or len(conv.users) != 1:
            continue
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = conv.args
        wv, bv = _value(w), _value(b) if b is not None else None
        if wv is None or (b is not None and bv is None) or transposed or wv.dim() != 4:
            continue
        user = next(iter(conv.users))
        if user.target not in (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor) or user.kwargs.get("alpha", 1) != 1:
            continue
        if len(user.args) != 2 or conv not in user.args or user.args[0] is user.args[1]:
            continue
        other = user.args[1] if user.args[0] is conv else user.args[0]
        cv = _value(other)
        out, val = user.meta.get("val"), conv.meta.get("val")
        if cv is None or not isinstance(out, torch.Tensor) or not isinstance(val, torch.Tensor) \
                or out.dtype != val.dtype or out.shape != val.shape or cv.dtype != wv.dtype:
            continue
        c = _channel_vector(cv, wv.shape[0])
        if c is None:
            continue
        if user.target is aten.sub.Tensor and user.args[0] is not conv:
            continue  # c - conv: not an affine map of the weight's kind here
        if user.target is aten.mul.Tensor:
            new_w, new_b = wv * c.reshape(-1, 1, 1, 1), (bv * c if bv is not None else None)
        else:
            sign = -1 if user.target is aten.sub.Tensor else 1
            new_w, new_b = wv, (bv if bv is not None else torch.zeros_like(c)) + sign * c
        args = list(conv.args)
        args[1] = const(new_w.contiguous(), conv)
        args[2] = const(new_b.contiguous(), conv) if new_b is not None else None
        conv.args = tuple(args)
        user.replace_all_uses_with(conv)
        gm.graph.erase_node(user)
        return True
    return False


def _static_ints(xs) -> bool:
    return all(isinstance(v, int) for v in xs)


def _pack_convolutions(gm) -> None:
    if not torch.backends.mkldnn.is_available():
        return
    for conv in list(gm.graph.nodes):
        if conv.target is not aten.convolution.default:
            continue
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = conv.args
        wv, xval = _value(w), x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if wv is None or (b is not None and _value(b) is None) or transposed or wv.dim() != 4:
            continue
        if not isinstance(xval, torch.Tensor) or xval.dim() != 4 or xval.dtype != torch.float32 \
                or wv.dtype != torch.float32 or xval.device.type != "cpu" or not _static_ints(xval.shape) \
                or not _static_ints(list(stride) + list(padding) + list(dilation) + [groups]) or xval.numel() == 0:
            continue
        try:
            packed = torch.ops.mkldnn._reorder_convolution_weight(wv.contiguous(), list(padding), list(stride),
                                                                  list(dilation), groups, list(xval.shape))
        except Exception:
            continue
        attr, target = "none", conv
        if len(conv.users) == 1:
            user = next(iter(conv.users))
            if user.target is aten.relu.default:
                attr, target = "relu", user
        with gm.graph.inserting_before(target):
            node = gm.graph.call_function(torch.ops.mkldnn._convolution_pointwise.default,
                                          (x, packed, b, list(padding), list(stride), list(dilation), groups,
                                           attr, [], ""))
        node.meta["val"] = target.meta["val"]
        target.replace_all_uses_with(node)
        if target is not conv:
            gm.graph.erase_node(target)
        gm.graph.erase_node(conv)
