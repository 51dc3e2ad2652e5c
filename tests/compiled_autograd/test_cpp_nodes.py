"""C++ custom autograd nodes (``torch::autograd::Function`` built with ``load_inline``)
under compiled autograd, as the seed's test_autograd_cpp_node*: the engine binds each
node's backward by name (``bind_function(is_custom_function=True)``); a traceable
node's backward is traced into the graph, a non-traceable one is an opaque call.

One extension holds every node, built once into torch's extensions directory
(``TORCH_EXTENSIONS_DIR``, reused while its source is unchanged).  Building it takes
about a minute on 2 cores, over the suite's CI budget: ``slow`` (run with ``-m slow``).
"""
import pytest
import torch

import torchkiln
from torchkiln import compiled_autograd
from torchkiln.compiled_autograd import protocol as compiled_autograd_protocol
from torchkiln.utils.counters import counters

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(compiled_autograd_protocol.unverified_reason() is not None,
                       reason=str(compiled_autograd_protocol.unverified_reason())),
]

CPP_SOURCE = """
struct Identity : public torch::autograd::Function<Identity> {
  static constexpr bool is_traceable = true;
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    return grad_output;
  }
};

// saved tensor, saved scalar and a non-traceable backward (an opaque call in the graph)
struct ScaledMul : public torch::autograd::Function<ScaledMul> {
  static constexpr bool is_traceable = false;
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& y, double scale) {
    ctx->save_for_backward({x, y});
    ctx->saved_data["scale"] = scale;
    return x * y * scale;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    auto saved = ctx->get_saved_variables();
    double scale = ctx->saved_data["scale"].toDouble();
    auto g = grad_output[0] * scale;
    return {g * saved[1], g * saved[0], torch::Tensor()};
  }
};

torch::Tensor identity(torch::Tensor x) { return Identity::apply(x); }
torch::Tensor scaled_mul(torch::Tensor x, torch::Tensor y, double scale) { return ScaledMul::apply(x, y, scale); }

TORCH_LIBRARY(torchkiln_ca_cpp_nodes, m) {
  m.def("identity", identity);
  m.def("scaled_mul", scaled_mul);
}
"""


@pytest.fixture(scope="module")
def ops():
    import torch.utils.cpp_extension

    torch.utils.cpp_extension.load_inline(name="torchkiln_ca_cpp_nodes", cpp_sources=CPP_SOURCE,
                                          is_python_module=False, verbose=False)
    return torch.ops.torchkiln_ca_cpp_nodes


def compiler_fn(gm):
    return torchkiln.compile(gm, backend="aot_eager", fullgraph=False, dynamic=True)


def _check(fn, captures):
    torchkiln.reset()
    compiled_autograd.reset()
    counters["compiled_autograd"].clear()
    expected = list(fn())
    with compiled_autograd.enable(compiler_fn):
        actual = list(fn())
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    assert counters["compiled_autograd"]["captures"] == captures


def test_traceable_cpp_node(ops):
    def fn():
        for _ in range(4):
            x = torch.ones(10, 10, requires_grad=True)
            (ops.identity(x) * 2).sum().backward()
            yield x.grad

    _check(fn, captures=1)


def test_cpp_node_saved_tensors_and_data(ops):
    def fn():
        torch.manual_seed(0)
        for scale in (1.5, 2.5, 1.5):  # saved_data scalars are lifted (the seed: static)
            x = torch.randn(4, 3, requires_grad=True)
            y = torch.randn(4, 3, requires_grad=True)
            ops.scaled_mul(x, y, scale).sum().backward()
            yield x.grad
            yield y.grad

    _check(fn, captures=1)
