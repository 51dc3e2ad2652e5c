"""Every model factory builds (seed 0, reproducibly) and runs eagerly: inference and a training step."""
import pytest
import torch

from torchkiln.bench.models import SUITE, build, resolve, transformers_available

TORCH_ONLY = [name for name, spec in SUITE.items() if not spec.needs_transformers]
HF = [name for name, spec in SUITE.items() if spec.needs_transformers]


def _train_step(work):
    work.model.train()
    loss = work.loss_fn(work.model(*work.args, **work.kwargs))
    assert loss.dim() == 0 and loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None for p in work.model.parameters())


@pytest.mark.parametrize("name", TORCH_ONLY)
def test_torch_only_model_runs(name):
    work = build(name)
    work.model.eval()
    with torch.no_grad():
        a = work.model(*work.args, **work.kwargs)
    again = build(name)
    again.model.eval()
    with torch.no_grad():
        b = again.model(*again.args, **again.kwargs)
    assert torch.equal(a, b), "two builds must be identical (seed 0)"
    _train_step(work)


@pytest.mark.skipif(not transformers_available(), reason="pip install torchkiln[models]")
@pytest.mark.parametrize("name", HF)
def test_transformers_model_runs(name):
    work = build(name)
    work.model.eval()
    with torch.no_grad():
        out = work.model(*work.args, **work.kwargs)
    assert torch.isfinite(out.logits).all()
    _train_step(work)


def test_reusable_model_classes():
    from torchkiln.bench.models.gpt import GPT, Block, GPTConfig
    from torchkiln.bench.models.resnet import ResNet

    config = GPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=32)
    assert GPT(config)(torch.randint(0, 64, (2, 16))).shape == (2, 16, 64)
    assert Block(config)(torch.randn(2, 16, 32)).shape == (2, 16, 32)
    assert ResNet(classes=5, width=4)(torch.randn(2, 3, 16, 16)).shape == (2, 5)


def test_suite_has_required_families():
    for name in ("mlp", "cnn", "lstm", "nanogpt", "gpt2_block", "resnet_cnn",
                 "hf_gpt2", "hf_bert", "hf_llama", "hf_t5", "hf_vit", "hf_resnet"):
        assert name in SUITE
    with pytest.raises(KeyError):
        resolve("no_such_model")


@pytest.mark.skipif(not transformers_available(), reason="pip install torchkiln[models]")
def test_llama_uses_grouped_query_attention():
    config = build("hf_llama").model.config
    assert config.num_key_value_heads < config.num_attention_heads
