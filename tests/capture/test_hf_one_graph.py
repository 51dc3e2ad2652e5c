"""transformers models the issue names are captured as one graph (inference)."""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter

transformers = pytest.importorskip("transformers")


def _one_graph(model, *args, **kwargs):
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(model, backend=cnt)
    with torch.no_grad():
        expected = model(*args, **kwargs).logits
        got = opt(*args, **kwargs).logits
    assert torch.allclose(expected, got, atol=1e-5)
    assert cnt.frame_count == 1, cnt.frame_count


def test_t5_without_the_config_deepcopy_break():
    from torchkiln.bench.models.hf import make_t5

    torch.manual_seed(0)
    w = make_t5("cpu")
    _one_graph(w.model.eval(), *w.args, **w.kwargs)


def test_wav2vec2_ctc_inference_one_graph():
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    torch.manual_seed(0)
    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2, vocab_size=20)
    _one_graph(Wav2Vec2ForCTC(cfg).eval(), torch.randn(2, 2000))


def test_llama_inference_one_graph():
    # transformers 5.17's rotary embedding enters maybe_autocast(), which asks
    # torch.is_autocast_enabled(): folded and guarded, not a break (5 graphs before)
    from torchkiln.bench.models.hf import make_llama

    torch.manual_seed(0)
    w = make_llama("cpu")
    _one_graph(w.model.eval(), *w.args, **w.kwargs)
