"""Graphs and graph breaks of transformers models: torchkiln vs torch.compile.

Inference (``torch.no_grad()``, ``.eval()``) of the bench's small Llama and T5 and a
small Wav2Vec2ForCTC, each captured by ``torchkiln.explain`` and by
``torch._dynamo.explain`` (the peer; benchmarks may call it).  Prints one markdown row
per model: graphs / breaks of each, and torchkiln's break reasons.  Counts do not depend
on the backend, so no kernels are built.

    python benchmarks/hf_graph_counts.py [cpu|cuda]
"""
from __future__ import annotations

import sys
import types
import warnings

import torch

import torchkiln
from torchkiln.bench.models.hf import make_llama, make_t5


def make_wav2vec2_ctc(device: str):
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2, vocab_size=20)
    return types.SimpleNamespace(model=Wav2Vec2ForCTC(cfg).to(device), args=(torch.randn(2, 2000, device=device),),
                                 kwargs={})


MODELS = {"llama": make_llama, "t5": make_t5, "wav2vec2_ctc": make_wav2vec2_ctc}


def counts(device: str = "cpu"):
    """``{model: (kiln_graphs, kiln_breaks, torch_graphs, torch_breaks, kiln_reasons)}``."""
    import torch._dynamo  # the peer, for comparison only

    rows = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        w = make(device)
        model = w.model.eval()
        with torch.no_grad():
            torchkiln.reset()
            kiln = torchkiln.explain(model)(*w.args, **w.kwargs)
            torch._dynamo.reset()
            peer = torch._dynamo.explain(model)(*w.args, **w.kwargs)
        reasons = sorted({str(r) for r in kiln.break_reasons})
        rows[name] = (kiln.graph_count, kiln.graph_break_count, peer.graph_count, peer.graph_break_count, reasons)
    return rows


def main():
    import transformers

    warnings.filterwarnings("ignore")
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    print("| model | torchkiln graphs / breaks | torch.compile graphs / breaks | torchkiln break reasons |")
    print("|---|---|---|---|")
    for name, (kg, kb, tg, tb, reasons) in counts(device).items():
        print(f"| {name} | {kg} / {kb} | {tg} / {tb} | {'; '.join(r[:120] for r in reasons) or '-'} |")


if __name__ == "__main__":
    main()
