"""Models from the transformers library, built from small configs with random weights.

Nothing is downloaded: each model is constructed from a config object.  Dropout is
off so that eager and compiled runs are comparable.  Needs ``pip install
torchkiln[models]``.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from . import Workload, cpu_or_cuda

VOCAB = 2048


def _lm_loss(target):
    return lambda out: F.cross_entropy(out.logits.flatten(0, 1), target.flatten())


def _tokens(batch, seq, device):
    return torch.randint(0, VOCAB, (batch, seq), device=device)


def _size(device, cpu, cuda):
    return cpu_or_cuda(device, cpu, cuda)


def make_gpt2(device: str) -> Workload:
    from transformers import GPT2Config, GPT2LMHeadModel

    width, layers = _size(device, (128, 2), (768, 6))
    config = GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=width, n_layer=layers, n_head=4 if width == 128 else 12,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    batch, seq = _size(device, (4, 64), (16, 256))
    model = GPT2LMHeadModel(config).to(device)
    return Workload(model, (_tokens(batch, seq, device),), loss_fn=_lm_loss(_tokens(batch, seq, device)))


def make_bert(device: str) -> Workload:
    from transformers import BertConfig, BertForMaskedLM

    width, layers, heads = _size(device, (128, 2, 4), (768, 6, 12))
    config = BertConfig(vocab_size=VOCAB, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * width, max_position_embeddings=256,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch, seq = _size(device, (4, 64), (16, 256))
    model = BertForMaskedLM(config).to(device)
    return Workload(model, (_tokens(batch, seq, device),), loss_fn=_lm_loss(_tokens(batch, seq, device)))


def make_llama(device: str) -> Workload:
    from transformers import LlamaConfig, LlamaForCausalLM

    width, layers, heads, kv_heads = _size(device, (128, 2, 4, 2), (1024, 6, 16, 4))
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=width, intermediate_size=width * 8 // 3, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         attention_dropout=0.0)
    batch, seq = _size(device, (4, 64), (16, 256))
    model = LlamaForCausalLM(config).to(device)
    return Workload(model, (_tokens(batch, seq, device),), loss_fn=_lm_loss(_tokens(batch, seq, device)))


def make_t5(device: str) -> Workload:
    from transformers import T5Config, T5ForConditionalGeneration

    width, layers, heads = _size(device, (128, 2, 4), (512, 6, 8))
    config = T5Config(vocab_size=VOCAB, d_model=width, d_kv=width // heads, d_ff=4 * width, num_layers=layers,
                      num_heads=heads, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    batch, seq = _size(device, (4, 32), (16, 256))
    model = T5ForConditionalGeneration(config).to(device)
    kwargs = {"input_ids": _tokens(batch, seq, device), "decoder_input_ids": _tokens(batch, seq, device)}
    return Workload(model, (), kwargs, loss_fn=_lm_loss(_tokens(batch, seq, device)))


def make_vit(device: str) -> Workload:
    from transformers import ViTConfig, ViTForImageClassification

    width, layers, heads = _size(device, (128, 2, 4), (768, 6, 12))
    config = ViTConfig(image_size=64, patch_size=8, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                       intermediate_size=4 * width, num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = _size(device, 8, 128)
    model = ViTForImageClassification(config).to(device)
    pixels = torch.randn(batch, 3, 64, 64, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    return Workload(model, (pixels,), loss_fn=lambda out: F.cross_entropy(out.logits, target))


def make_resnet(device: str) -> Workload:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="basic",
                          num_labels=10)
    batch = _size(device, 8, 128)
    model = ResNetForImageClassification(config).to(device)
    pixels = torch.randn(batch, 3, 64, 64, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    return Workload(model, (pixels,), loss_fn=lambda out: F.cross_entropy(out.logits, target))
