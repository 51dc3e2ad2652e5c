"""Split a graph captured inside a DDP forward at DDP's gradient-bucket boundaries.

DDP all-reduces gradients bucket by bucket: buckets hold parameters in reverse order
of use, ``bucket_cap_mb`` each (the first one ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``),
and a bucket's all-reduce starts when the reducer's hooks have seen all its gradients.
A graph compiled as one piece produces every parameter gradient at the end of its
backward, so no all-reduce overlaps the backward.  :class:`DDPOptimizer` (torch's
``DDPOptimizer`` in ``torch._dynamo.backends.distributed`` does the same) wraps the
user's backend: it walks the graph backwards, filling buckets with the byte sizes of
the parameters each node uses, cuts the graph where a bucket is full, and compiles each
piece with the user's backend.  Each piece is its own autograd node, so the
gradients of the last piece's parameters reach DDP's hooks while the earlier pieces'
backward still runs.

``TORCHKILN_LOGS=ddp_graphs`` prints the buckets and the pieces.  A graph that sets
grad mode or autocast inside (transformers' rotary embeddings: ``no_grad`` and
``autocast(enabled=False)``) is split too: ``split_module`` starts each piece cut out
of such a region by re-entering it and closes it at the piece's end, as in torch.
Calls with grad mode off, graphs without a parameter that needs a gradient, graphs that
fit one bucket and graphs whose mode changes ``split_module`` cannot replay (non-constant
arguments) are compiled whole.
"""
from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, field

import torch
from torch.fx.passes.split_module import split_module

from ..config import config
from ..exc import BackendCompilerFailed
from ..utils.counters import counters
from ..utils.logging import get_artifact_logger

ddp_graphs_log = get_artifact_logger("ddp_graphs")

_GLOBAL_STATE = {torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast,
                 torch.amp.autocast_mode._exit_autocast}


@dataclass
class Bucket:
    """One DDP bucket's share of the graph: its nodes and the parameters they use."""
    size: int = 0  # bytes of parameters counted towards the cap
    params: list[str] = field(default_factory=list)  # placeholder sources of those parameters
    nodes: list[torch.fx.Node] = field(default_factory=list)


class DDPOptimizer:
    """A backend that splits the graph at DDP bucket boundaries, then calls ``backend`` per piece.

    ``ddp`` is the active ``DistributedDataParallel`` module (its ``bucket_bytes_cap`` and
    ``parameters_to_ignore`` are read); ``backend`` is the user's backend
    (``backend(gm, example_inputs) -> callable``).  The pieces are compiled on the first
    call, with the real values flowing through the split graph as example inputs, so
    every piece's backend call sees real example inputs as capture's contract says.
    """

    def __init__(self, ddp, backend, bucket_bytes_cap: int | None = None, first_bucket_cap: int | None = None):
        self.backend = backend
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)
        self.bucket_bytes_cap = bucket_bytes_cap if bucket_bytes_cap is not None else ddp.bucket_bytes_cap
        default_first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024)
        self.first_bucket_cap = min(first_bucket_cap if first_bucket_cap is not None else default_first,
                                    self.bucket_bytes_cap)
        ignored = getattr(ddp, "parameters_to_ignore", ()) or ()
        self.ignored_params = {id(p) for name, p in ddp.module.named_parameters() if name in ignored}
        self.buckets: list[Bucket] = []

    def _param_sizes(self, gm, example_inputs) -> dict[torch.fx.Node, int]:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        sizes = {}
        for node, value in zip(placeholders, example_inputs):
            if isinstance(value, torch.nn.Parameter) and value.requires_grad and id(value) not in self.ignored_params:
                sizes[node] = value.numel() * value.element_size()
        return sizes

    def bucket_graph(self, gm, example_inputs) -> list[Bucket]:
        """The graph's nodes in buckets, first bucket first (nodes of a bucket in reverse order)."""
        param_sizes = self._param_sizes(gm, example_inputs)
        buckets = [Bucket()]
        bucket_of: dict[torch.fx.Node, int] = {}
        for node in reversed(gm.graph.nodes):
            if node.op in ("placeholder", "output"):
                continue
            cap = self.first_bucket_cap if len(buckets) == 1 else self.bucket_bytes_cap
            current = buckets[-1]
            if current.size >= cap and _has_external_output(current, bucket_of, len(buckets) - 1):
                buckets.append(Bucket())
                current = buckets[-1]
            for arg in node.all_input_nodes:
                if arg in param_sizes and arg.meta.get("_ddp_bucketed") is None:
                    arg.meta["_ddp_bucketed"] = True
                    current.size += param_sizes[arg]
                    current.params.append(str(arg.meta.get("source", arg.name)))
            current.nodes.append(node)
            bucket_of[node] = len(buckets) - 1
        for node in param_sizes:
            node.meta.pop("_ddp_bucketed", None)
        if len(buckets) > 1 and buckets[-1].size == 0:
            # a preamble without parameters joins the bucket after it
            buckets[-2].nodes.extend(buckets.pop().nodes)
        return buckets

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        if not torch.is_grad_enabled():
            ddp_graphs_log.debug("not split: grad mode is off")
            return self.backend(gm, example_inputs)
        buckets = self.buckets = self.bucket_graph(gm, example_inputs)
        _log_buckets(buckets, self.bucket_bytes_cap)
        if len(buckets) <= 1:
            counters["ddp"]["whole_graphs"] += 1
            return self.backend(gm, example_inputs)
        # pieces in graph order: the last bucket holds the first nodes
        partition = {node: len(buckets) - 1 - i for i, b in enumerate(buckets) for node in b.nodes}
        try:  # grad-mode/autocast regions are replayed per piece; it asserts what it cannot replay
            split_gm = split_module(gm, None, lambda node: partition[node], keep_original_order=True)
        except AssertionError as e:
            if not any(n.op == "call_function" and n.target in _GLOBAL_STATE for n in gm.graph.nodes):
                raise
            ddp_graphs_log.debug("not split: split_module cannot replay the graph's grad mode or autocast: %s", e)
            counters["ddp"]["whole_graphs"] += 1
            return self.backend(gm, example_inputs)
        counters["ddp"]["split_graphs"] += 1
        counters["ddp"]["pieces"] += len(buckets)
        _normalize_outputs(split_gm)
        _copy_meta(gm, split_gm)
        if ddp_graphs_log.isEnabledFor(10):
            text = [f"---split graph---\n{split_gm.graph}"]
            for name, sub in split_gm.named_children():
                text.append(f"---{name} graph---\n{sub.graph}")
            ddp_graphs_log.debug("\n".join(text))
        return _LazilyCompiledSplit(split_gm, self.backend)


def _has_external_output(bucket: Bucket, bucket_of: dict, index: int) -> bool:
    """Whether a node of ``bucket`` is used outside it (a later piece or the graph output)."""
    for node in bucket.nodes:
        for user in node.users:
            if user.op == "output" or bucket_of.get(user, index) != index:
                return True
    return False


def _log_buckets(buckets: list[Bucket], cap: int) -> None:
    if not ddp_graphs_log.isEnabledFor(10):
        return
    lines = [f"DDPOptimizer: {len(buckets)} bucket(s), bucket_bytes_cap={cap}"]
    for i, b in enumerate(buckets):
        lines.append(f"  bucket {i}: {b.size} bytes, {len(b.nodes)} nodes, params {b.params}")
    ddp_graphs_log.debug("\n".join(lines))


def _normalize_outputs(split_gm: torch.fx.GraphModule) -> None:
    """Make every piece return a tuple (the backend contract), reading it with getitem."""
    for node in list(split_gm.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(split_gm, node.target)
        out = next(n for n in sub.graph.nodes if n.op == "output")
        if isinstance(out.args[0], (tuple, list)):
            continue
        out.args = ((out.args[0],),)
        sub.recompile()
        with split_gm.graph.inserting_after(node):
            item = split_gm.graph.call_function(operator.getitem, (node, 0))
        node.replace_all_uses_with(item, delete_user_cb=lambda user: user is not item)
    split_gm.recompile()


def _copy_meta(gm: torch.fx.GraphModule, split_gm: torch.fx.GraphModule) -> None:
    """Give each piece's placeholders the metadata of the nodes they stand for."""
    by_name = {n.name: n for n in gm.graph.nodes}
    for sub in split_gm.children():
        for node in sub.graph.nodes:
            orig = by_name.get(node.name)
            if orig is not None:
                for key in ("example_value", "source", "val", "tensor_meta"):
                    if key in orig.meta and key not in node.meta:
                        node.meta[key] = orig.meta[key]
        sub.meta.update({k: v for k, v in gm.meta.items() if k != "torchkiln_sources"})


class _Compiled(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class _LazilyCompiledSplit:
    """Runs the split graph; the first call compiles each piece with the real values reaching it."""

    def __init__(self, split_gm: torch.fx.GraphModule, backend) -> None:
        self.split_gm = split_gm
        self.backend = backend
        self.compiled = False

    def _compile_piece(self, piece: torch.fx.GraphModule, example_inputs: list):
        """The backend's callable for one piece; a failing backend falls back to running the
        piece as it is with one warning, unless ``config.suppress_errors`` is False (then
        :class:`BackendCompilerFailed`), as capture does for a whole graph."""
        try:
            return self.backend(piece, example_inputs)
        except Exception as e:  # noqa: BLE001
            name = getattr(self.backend, "__name__", type(self.backend).__name__)
            if not config.suppress_errors:
                raise BackendCompilerFailed(name, e) from e
            warnings.warn(f"torchkiln: backend {name!r} raised {type(e).__name__}: {e} on a DDP bucket piece; "
                          "running that piece eagerly")
            return piece.forward

    def __call__(self, *args):
        if self.compiled:
            return self.split_gm(*args)
        env = {}
        inputs = iter(args)
        result = None
        for node in self.split_gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
            elif node.op == "call_module":
                sub_args = [env[a] for a in node.args]
                fn = self._compile_piece(getattr(self.split_gm, node.target), sub_args)
                self.split_gm.add_submodule(node.target, _Compiled(fn))
                env[node] = fn(*sub_args)
            elif node.op == "output":
                result = torch.fx.node.map_arg(node.args[0], env.__getitem__)
            else:
                args_, kwargs_ = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
                env[node] = node.target(*args_, **kwargs_)
        self.compiled = True
        return result
