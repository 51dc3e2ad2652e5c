"""The benchmark suite: named factories that build a model with random weights.

Each factory is ``make(device: str) -> Workload``.  Importing this package is cheap
(torch only); a factory's module is imported when the model is built, so the model
classes can be reused elsewhere, e.g. ``from torchkiln.bench.models.gpt import GPT,
GPTConfig``.  A model name may also be ``"package.module:function"``, a factory of
one's own.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any, Callable

import torch

MODELS_EXTRA_HINT = "pip install torchkiln[models]"


@dataclasses.dataclass
class Workload:
    """A model with example inputs and a training loss.

    ``model(*args, **kwargs)`` is one inference call; ``loss_fn(output)`` turns its
    output into a scalar float32 tensor for a training step (targets live in the
    closure).  Every random value is drawn from a fixed seed, so two builds are equal.
    """

    model: torch.nn.Module
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    loss_fn: Callable[[Any], torch.Tensor] = None


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    factory: str  # "module:function"
    description: str
    needs_transformers: bool = False


def _spec(name, factory, description, hf=False):
    return ModelSpec(name, f"torchkiln.bench.models.{factory}", description, hf)


SUITE: dict[str, ModelSpec] = {s.name: s for s in [
    _spec("mlp", "mlp:make_mlp", "4-layer MLP, GELU, LayerNorm"),
    _spec("cnn", "cnn:make_cnn", "small CNN: conv-BN-ReLU, pooling, linear head"),
    _spec("resnet_cnn", "resnet:make_resnet", "ResNet-style CNN with basic residual blocks"),
    _spec("lstm", "lstm:make_lstm", "2-layer LSTM language model"),
    _spec("nanogpt", "gpt:make_nanogpt", "nanoGPT-style decoder-only transformer"),
    _spec("gpt2_block", "gpt:make_gpt2_block", "one GPT-2-style transformer block"),
    _spec("moe", "moe:make_moe", "mixture-of-experts layer: top-2 routing, data-dependent expert sizes"),
    _spec("hf_gpt2", "hf:make_gpt2", "transformers GPT2LMHeadModel", True),
    _spec("hf_bert", "hf:make_bert", "transformers BertForMaskedLM", True),
    _spec("hf_llama", "hf:make_llama", "transformers LlamaForCausalLM (GQA, rotary)", True),
    _spec("hf_t5", "hf:make_t5", "transformers T5ForConditionalGeneration (encoder-decoder)", True),
    _spec("hf_vit", "hf:make_vit", "transformers ViTForImageClassification", True),
    _spec("hf_resnet", "hf:make_resnet", "transformers ResNetForImageClassification", True),
]}

# ``--quick``: small models that compile fast, covering MLP, conv, recurrent and attention.
QUICK = ("mlp", "cnn", "lstm", "nanogpt")


def transformers_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def resolve(name: str) -> ModelSpec:
    """The spec of a suite model, or of a ``"module:function"`` factory; ``KeyError`` otherwise."""
    if name in SUITE:
        return SUITE[name]
    if ":" in name:
        return ModelSpec(name, name, "user factory")
    raise KeyError(f"unknown model {name!r}; `torchkiln bench --list` shows the suite")


def build(name: str, device: str = "cpu") -> Workload:
    """Build model ``name`` on ``device`` with seed 0 (weights, inputs and targets)."""
    spec = resolve(name)
    module, _, fn = spec.factory.partition(":")
    factory = getattr(importlib.import_module(module), fn)
    torch.manual_seed(0)
    return factory(device)


def cpu_or_cuda(device: str, cpu, cuda):
    """The CPU batch size (sized for a 5-100 ms step on one thread) or the GPU one."""
    return cuda if str(device).startswith("cuda") else cpu
