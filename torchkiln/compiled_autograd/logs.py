"""``TORCHKILN_LOGS=compiled_autograd`` prints each captured backward graph, one block
per autograd node in engine order (``# SumBackward0 (NodeCall 1)``); ``compiled_autograd_verbose``
also prints the engine's reasons for a recapture ("Cache miss due to new autograd node:
..." / "Cache miss due to changed shapes: marking size idx 0 of ... as dynamic")."""
from __future__ import annotations

import torch

from ..utils.logging import _enabled, artifact_enabled, get_artifact_logger

graph_log = get_artifact_logger("compiled_autograd")
verbose_log = get_artifact_logger("compiled_autograd_verbose")


def format_graph(gm: torch.fx.GraphModule, capture_id: int, accumulates=(), used_inputs=None) -> str:
    """The graph as readable lines, each group of nodes under the autograd node it came
    from, then the leaf gradients the runtime accumulates into ``.grad`` (``inputs[i]``:
    the engine's inputs; the graph's ``inputs[k]`` is the engine's ``used_inputs[k]``)."""
    lines = [f"CompiledAutograd{capture_id}:"]
    if used_inputs is not None:
        lines.append(f"    # graph inputs: the engine's inputs {used_inputs}")
    origin = None
    for node in gm.graph.nodes:
        node_origin = node.meta.get("ca_origin", "")
        if node.op != "placeholder" and node_origin != origin and node_origin:
            lines.append(f"    # {node_origin}")
        origin = node_origin if node.op != "placeholder" else origin
        lines.append(f"    {node.format_node()}")
    outputs = list(gm.graph.nodes)[-1].args[0]
    first = len(outputs) - len(accumulates)
    for rec, out in zip(accumulates, outputs[first:]):
        hooks = f", then post-accumulate-grad hooks {list(rec.post_hooks)}" if rec.post_hooks else ""
        lines.append(f"    inputs[{rec.input_index}].grad <- {out}{hooks}  # {rec.origin}")
    return "\n".join(lines)


def log_graph(gm: torch.fx.GraphModule, capture_id: int, accumulates=(), verbose: bool = False,
              used_inputs=None) -> None:
    """``verbose``: compiled_autograd_verbose was on when ``enable`` was entered."""
    if artifact_enabled("compiled_autograd") or verbose:
        text = format_graph(gm, capture_id, accumulates, used_inputs)
        if artifact_enabled("compiled_autograd"):
            graph_log.debug("%s", text)
        else:
            verbose_log.debug("%s", text)


def verbose(msg: str, *args) -> None:
    verbose_log.debug(msg, *args)


def verbose_enabled() -> bool:
    """``artifact_enabled("compiled_autograd_verbose")`` without its lookups: asked at
    every ``enable`` (every training step's backward).  ``verbose_log`` is that artifact's
    logger (``logging`` keeps one object per name) and ``_enabled`` the set that
    ``set_logs`` updates in place."""
    return "compiled_autograd_verbose" in _enabled or verbose_log.isEnabledFor(10)


class EngineLogger:
    """What the engine's ``set_verbose_logger`` gets: called (2.11) or ``.debug``'ed with each message."""

    def __call__(self, msg: str) -> None:
        verbose_log.debug("%s", msg)

    def debug(self, msg: str, *args) -> None:
        verbose_log.debug(msg, *args)

    def isEnabledFor(self, level) -> bool:  # noqa: N802 - logging.Logger's name
        return True


# The engine keeps a borrowed reference: this object must outlive every enable().
ENGINE_LOGGER = EngineLogger()
