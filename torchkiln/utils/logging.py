"""``TORCHKILN_LOGS``: comma-separated artifacts printed on demand.

Artifacts: graph_code, graph_breaks, guards, recompiles, aot_graphs, output_code,
perf_hints, ddp_graphs (the DDP bucket split of a graph), compiled_autograd,
compiled_autograd_verbose.  ``TORCHKILN_LOGS=+all`` (or ``all``) turns every one on.
Each artifact is a standard ``logging`` logger named ``torchkiln.<artifact>``, so
normal logging configuration works too.
"""
from __future__ import annotations

import logging
import os
import sys

ARTIFACTS = ("graph_code", "graph_breaks", "guards", "recompiles", "aot_graphs", "output_code", "perf_hints",
             "ddp_graphs", "compiled_autograd", "compiled_autograd_verbose")


def _enabled_from_env() -> set[str]:
    raw = os.environ.get("TORCHKILN_LOGS", "")
    names = {part.strip().lstrip("+") for part in raw.split(",") if part.strip()}
    if "all" in names:
        return set(ARTIFACTS)
    return names


_enabled = _enabled_from_env()
_loggers: dict[str, logging.Logger] = {}


def artifact_enabled(name: str) -> bool:
    """True when ``name`` is switched on through TORCHKILN_LOGS or logging config."""
    return name in _enabled or get_artifact_logger(name).isEnabledFor(logging.DEBUG)


def set_logs(*names: str) -> None:
    """Switch artifacts on from code (like ``torch._logging.set_logs``); no names: all off."""
    _enabled.clear()
    _enabled.update(names)
    for name in ARTIFACTS:
        _configure(get_artifact_logger(name), name)


def _configure(logger: logging.Logger, name: str) -> None:
    if name in _enabled:
        logger.setLevel(logging.DEBUG)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"[torchkiln.{name}] %(message)s"))
            logger.addHandler(handler)
        logger.propagate = False
    else:
        logger.setLevel(logging.NOTSET)


def get_artifact_logger(name: str) -> logging.Logger:
    """The logger for one artifact; ``logger.debug(...)`` prints when it is enabled."""
    logger = _loggers.get(name)
    if logger is None:
        logger = logging.getLogger(f"torchkiln.{name}")
        _configure(logger, name)
        _loggers[name] = logger
    return logger
