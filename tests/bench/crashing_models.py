"""Model factories that fail in the ways the suite must survive (used by the harness tests,
by name ``crashing_models:make_...`` with this directory on ``PYTHONPATH``)."""
import os

from torchkiln.bench.models.mlp import make_mlp


def make_broken(device):
    raise RuntimeError("this model cannot be built\nsecond line")


def make_crash(device):
    os._exit(3)  # the worker process dies without a word


def make_tiny(device):
    return make_mlp(device)
