"""Calls whose fake (meta) kernels or decompositions accept what eager's kernels refuse, or
promote where eager keeps the input's dtype (codegen/eager_refusals.py): the compiled call
raises eager's exception type where eager raises, else gives eager's answer and dtype."""
from __future__ import annotations

import re

import pytest
import torch

import torchkiln

F = torch.nn.functional
_g = torch.Generator().manual_seed(0)
X, P = torch.randn(2, 3, generator=_g), torch.rand(2, 3, generator=_g)
T = torch.tensor([1, 2])
F64 = torch.ones(3, dtype=torch.float64)

MIXED_DTYPES = {  # (fixed) all computed a value where eager raises, unless noted
    "nll_loss_int32_target": lambda: (F.nll_loss, (X.log_softmax(1), T.int()), {}),
    "nll_loss_float64_weight": lambda: (F.nll_loss, (X.log_softmax(1), T), {"weight": F64}),
    "nll_loss_bool_weight": lambda: (F.nll_loss, (X.log_softmax(1), T), {"weight": F64.bool()}),
    "nll_loss2d_int32_target": lambda: (F.nll_loss, (X.view(1, 2, 3, 1), torch.zeros(1, 3, 1, dtype=torch.int32)), {}),
    "cross_entropy_int32_target": lambda: (F.cross_entropy, (X, T.int()), {}),
    "cross_entropy_float64_weight": lambda: (F.cross_entropy, (X, T), {"weight": F64, "label_smoothing": 0.1}),
    "multi_margin_float64_weight": lambda: (F.multi_margin_loss, (X, T), {"weight": F64}),
    "multi_margin_bool_weight": lambda: (F.multi_margin_loss, (X, T), {"weight": F64.bool()}),
    "multi_margin_int32_target": lambda: (F.multi_margin_loss, (X, T.int()), {}),
    "multilabel_margin_int32_target": lambda: (F.multilabel_margin_loss, (X, torch.zeros(2, 3, dtype=torch.int32)), {}),
    "layer_norm_float64_weight": lambda: (F.layer_norm, (X, (3,), F64), {}),
    "group_norm_float64_weight": lambda: (F.group_norm, (X.view(2, 3, 1), 1, F64), {}),
    "index_put_float64_values": lambda: (torch.index_put, (X, (T - 1,), P[:2].double()), {}),
    "index_put_int_values": lambda: (torch.index_put, (X, (T - 1,), T), {}),
    "mv_mixed": lambda: (torch.mv, (X, P[0].double()), {}),
    "heaviside_mixed": lambda: (torch.heaviside, (X, P.double()), {}),
    "cross_mixed": lambda: (torch.linalg.cross, (X, P.double()), {}),
    "bce_float64_target": lambda: (F.binary_cross_entropy, (P, P.double()), {}),
    # (fixed) a float64 result where eager's is float32
    "bce_float64_weight": lambda: (F.binary_cross_entropy, (P, P), {"weight": F64}),
    "soft_margin_float64_target": lambda: (F.soft_margin_loss, (X, P.double()), {}),
    "huber_float64_target": lambda: (F.huber_loss, (X, P.double()), {}),
    # what eager takes still gives its answer
    "layer_norm_bf16_float32_weight": lambda: (F.layer_norm, (X.bfloat16(), (3,), F64.float()), {}),
    "nll_loss_uint8_target": lambda: (F.nll_loss, (X.log_softmax(1), T.to(torch.uint8)), {}),
    "mse_float64_target": lambda: (F.mse_loss, (X, P.double()), {}),
}


def _raises_or_answers_as_eager(fn, *args):
    torchkiln.reset()
    try:
        expected = fn(*args)
    except (RuntimeError, NotImplementedError, ValueError) as eager:
        with pytest.raises(type(eager), match=re.escape(str(eager).split(" ")[0])):
            torchkiln.compile(fn)(*args)
        return
    got = torchkiln.compile(fn)(*args)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, equal_nan=True)


@pytest.mark.parametrize("name", sorted(MIXED_DTYPES))
def test_mixed_dtypes_as_eager(name):
    op, args, kwargs = MIXED_DTYPES[name]()
    _raises_or_answers_as_eager(lambda *a: op(*a, **kwargs), *args)


def test_multilabel_margin_loss_stops_at_the_first_minus_one():
    # (fixed) torch's decomposition counted the labels after a row's first -1: 1.61 where eager says 0.94
    target = torch.tensor([[1, -1, 0], [2, -1, 0]])
    for reduction in ("none", "mean"):
        _raises_or_answers_as_eager(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction), X, target)


def test_multi_margin_loss_of_bool_raises_not_implemented():
    _raises_or_answers_as_eager(F.multi_margin_loss, X > 0, T)


OUT_OF_ANOTHER_DTYPE = {  # (fixed) functionalization computed the functional op and copied into out=
    "prod_into_int64": lambda f, o: torch.prod(f, 0, out=o),  # eager multiplies in int64: 0; kiln gave -3
    "sum_into_int64": lambda f, o: torch.sum(f, 0, out=o),  # eager 3: the values cast to int64, then summed
    "amax_into_float64": lambda f, o: torch.amax(f, 0, out=o.double()),  # eager raises
    "round_into_float64": lambda f, o: torch.round(f[0], out=o.double()),  # eager raises
}


@pytest.mark.parametrize("name", sorted(OUT_OF_ANOTHER_DTYPE))
def test_out_of_another_dtype_as_eager(name):
    fn = OUT_OF_ANOTHER_DTYPE[name]
    f, o = torch.tensor([0.5, 1.5, 2.5, 0.25]), torch.empty((), dtype=torch.int64)
    torchkiln.reset()
    try:
        expected = fn(f, o.clone())
    except RuntimeError as eager:
        with pytest.raises(RuntimeError, match=re.escape(str(eager).split(" ")[0])):
            torchkiln.compile(fn)(f, o.clone())
        return
    got = torchkiln.compile(fn)(f, o.clone())
    assert got.dtype == expected.dtype and torch.equal(got, expected), (got, expected)
