"""Real models capture whole: 0 graph breaks under fullgraph=True, matching eager.

The GPT-2-style transformer and the ResNet-style CNN are the bench suite's
(torchkiln/bench/models); the third is transformers' GPT2LMHeadModel (small config,
no download).
"""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter, same
from torchkiln.bench.models.gpt import GPT, GPTConfig
from torchkiln.bench.models.resnet import ResNet


def _capture_whole(model, *args, tol=1e-4):
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(model, backend=cnt, fullgraph=True)
    with torch.no_grad():
        expected = model(*args)
        got = opt(*args)
        again = opt(*args)
    assert same(expected, got, tol=tol) and same(expected, again, tol=tol)
    assert cnt.frame_count == 1
    return cnt


def test_gpt2_style_transformer():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=100, n_layer=2, n_head=4, n_embd=32)).eval()
    tokens = torch.randint(0, 100, (2, 16))
    cnt = _capture_whole(model, tokens)
    assert cnt.op_count > 20


def test_gpt2_style_transformer_training_graph():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=100, n_layer=2, n_head=4, n_embd=32))
    tokens = torch.randint(0, 100, (2, 16))
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(model, backend=cnt, fullgraph=True)
    opt(tokens).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(tokens).sum().backward()
    assert all(same(g, p.grad) for g, p in zip(grads, model.parameters()))
    assert cnt.frame_count == 1


def test_resnet_style_cnn():
    torch.manual_seed(0)
    model = ResNet(classes=10, width=8, blocks=(1, 1, 1, 1)).eval()
    _capture_whole(model, torch.randn(2, 3, 32, 32))


def test_hf_gpt2_lm_head_model():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).eval()
    input_ids = torch.randint(0, 100, (2, 12))
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(model, backend=cnt, fullgraph=True)
    with torch.no_grad():
        expected = model(input_ids)
        for _ in range(2):
            got = opt(input_ids)
            assert same(expected.logits, got.logits)
            # the KV cache built inside the frame is rebuilt after the graph
            for ref_layer, got_layer in zip(expected.past_key_values.layers, got.past_key_values.layers):
                assert same(ref_layer.keys, got_layer.keys) and same(ref_layer.values, got_layer.values)
        got = opt(input_ids, use_cache=False)
        assert got.past_key_values is None and same(expected.logits, got.logits)
    assert cnt.frame_count == 2  # use_cache is specialised: one recompile
    assert not torchkiln.counters["graph_break"]


def test_hf_gpt2_automatic_dynamic_sequence_length():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(model, backend=cnt)
    with torch.no_grad():
        for t in (6, 9, 12):
            ids = torch.randint(0, 50, (2, t))
            assert same(model(ids).logits, opt(ids).logits)
    # static, then one recompile with the sequence length symbolic. torch 2.11's fake
    # linear refines the sequence length to its value (a ShapeEnv replacement), so there the
    # dynamic graph is guarded on it and each new length recompiles: correct, not reused.
    torch_minor = tuple(int(p) for p in torch.__version__.split(".")[:2])
    assert cnt.frame_count == (3 if torch_minor < (2, 12) else 2)
    assert not torchkiln.counters["graph_break"]
