"""Distributed training under torchkiln.compile (after capture in the pipeline).

- :mod:`.ddp`: ``torchkiln.compile(DDP(model))`` runs ``DistributedDataParallel.forward``
  natively with the wrapped module compiled, as torch.compile's frame hook skips DDP's
  frame; ``DDP(torchkiln.compile(model))`` needs nothing special.
- :mod:`.ddp_optimizer`: with ``torchkiln.config.optimize_ddp`` (default True), a graph
  captured inside a DDP forward is split at DDP's gradient-bucket boundaries and each
  piece compiled separately by the user's backend (torch's DDPOptimizer), so each
  bucket's all-reduce starts while the rest of the backward still runs.
- :mod:`.collectives`: functional collectives (``torch.distributed._functional_collectives``)
  become graph nodes; in-place ``torch.distributed`` collectives are graph breaks.

Importing this package (``import torchkiln`` does) registers these with capture.
"""
from __future__ import annotations

import torch.distributed as _dist

if _dist.is_available():
    from wrapt import register_post_import_hook as _after_import

    # the collectives' handlers are registered when capture's interpreter is first imported
    # (a process whose frames all come from warm-start records never imports it: ~1 s)
    _after_import(lambda _: __import__(__name__ + ".collectives"), "torchkiln.capture.symbolic_convert")
    from .ddp import install as _install_ddp
    from .fsdp import install as _install_fsdp

    _install_ddp()
    _install_fsdp()
