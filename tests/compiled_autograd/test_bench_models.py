"""Every torch-only model of ``torchkiln bench`` trained three steps with
``config.compiled_autograd = True``: gradients equal eager's after each step, and the
backward is captured at most twice (the first backward assigns ``.grad``, the second
accumulates; later ones are cache hits).

The training step (forward, loss, backward) is one ``torchkiln.compile``d function, as
the config switch applies to the backward inside a compiled function.  Backend
"aot_eager" keeps this inside the CI budget; ``TORCHKILN_CA_TEST_BACKEND=inductor`` runs
the default backend (the transformers models are checked by hand the same way with
``TORCHKILN_CA_MODELS=hf_gpt2,...``).
"""
import copy
import os

import pytest
import torch

import torchkiln
from torchkiln.compiled_autograd import protocol as compiled_autograd_protocol
from torchkiln.bench.models import build
from torchkiln.config import config
from torchkiln.utils.counters import counters

# capture needs the engine protocol torchkiln verified; elsewhere enable() runs eagerly
# (test_unverified_fallback.py checks that)
pytestmark = pytest.mark.skipif(compiled_autograd_protocol.unverified_reason() is not None,
                                reason=str(compiled_autograd_protocol.unverified_reason()))

BACKEND = os.environ.get("TORCHKILN_CA_TEST_BACKEND", "aot_eager")
MODELS = os.environ.get("TORCHKILN_CA_MODELS", "mlp,cnn,nanogpt,gpt2_block").split(",")


@pytest.fixture(autouse=True)
def _clean():
    torchkiln.compiled_autograd.reset()
    torchkiln.reset()
    yield
    torchkiln.compiled_autograd.reset()


@pytest.mark.parametrize("name", MODELS)
def test_three_training_steps_match_eager(name):
    work = build(name, "cpu")
    eager_model = work.model
    model = copy.deepcopy(eager_model)

    def step(m, args, kwargs):
        loss = work.loss_fn(m(*args, **kwargs))
        loss.backward()
        return loss.detach()

    with config.patch(compiled_autograd=True):
        compiled_step = torchkiln.compile(step, backend=BACKEND)
    for i in range(3):
        torch.manual_seed(i)
        ref = step(eager_model, work.args, work.kwargs)
        torch.manual_seed(i)
        out = compiled_step(model, work.args, work.kwargs)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        for (pname, p_ref), p in zip(eager_model.named_parameters(), model.parameters()):
            if p_ref.grad is None:
                assert p.grad is None, pname
            else:
                torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-4, msg=f"{name} step {i}: {pname}")
    assert 1 <= counters["compiled_autograd"]["captures"] <= 2


def test_tiny_transformers_gpt2_three_steps():
    """A transformers model (tiny GPT2LMHeadModel config), trained as above."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    eager_model = transformers.GPT2LMHeadModel(cfg).train()
    model = copy.deepcopy(eager_model)
    ids = torch.randint(0, 64, (2, 16))

    def step(m, ids):
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    with config.patch(compiled_autograd=True):
        compiled_step = torchkiln.compile(step, backend=BACKEND)
    for i in range(3):
        ref = step(eager_model, ids)
        out = compiled_step(model, ids)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        for (pname, p_ref), p in zip(eager_model.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-4, msg=f"step {i}: {pname}")
    assert 1 <= counters["compiled_autograd"]["captures"] <= 2
