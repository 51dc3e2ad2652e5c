"""The model suite and the ``torchkiln bench`` harness.

``torchkiln.bench.models`` holds the suite (torch-only models in this package and
transformers models built from configs with random weights); ``run`` measures one
model in one mode (correctness against eager, graphs, compile time, steady-state time,
peak memory); ``suite`` runs many, each in its own subprocess; ``report`` prints the
table and writes the JSON.  This package may call ``torch.compile``: it is the peer
that torchkiln is measured against.
"""
