"""Counters, logging and timing shared by every stage."""
from .counters import counters, reset_counters
from .logging import get_artifact_logger, artifact_enabled

__all__ = ["counters", "reset_counters", "get_artifact_logger", "artifact_enabled"]
