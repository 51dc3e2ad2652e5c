"""Polyfills of torch functions whose ATen composite checks data on the way (so running
them on fake tensors fails and the call would break the graph), for the calls where
that check depends only on sizes.

``torch.cov`` without weights divides by ``N - correction``, a size; its ATen code still
asks the tensor ``norm_factor <= 0`` (``aten.equal`` on fake tensors).  The polyfills do
the same ops in the same order (the same dtypes: an integer input gives a float result)
and hand every other call (weights, a degenerate ``N - correction <= 0`` that warns, an
input eager rejects) to the ATen op, which breaks the graph as before.
"""
import torch

__torchkiln_polyfill__ = True


def cov_(input, *, correction=1, fweights=None, aweights=None):
    if fweights is not None or aweights is not None or input.dim() > 2 or input.dtype == torch.bool:
        return torch.ops.aten.cov.default(input, correction, fweights, aweights)
    x = input if input.dim() == 2 else input.view(1, -1)
    n = x.shape[1]
    norm = n - correction
    if norm <= 0:  # eager warns and divides by zero
        return torch.ops.aten.cov.default(input, correction)
    x = x - (x.sum(1) / n).unsqueeze(1)
    return torch.true_divide(torch.mm(x, x.t().conj()), norm).squeeze()


def corrcoef_(input):
    if input.dim() > 2 or input.dtype == torch.bool:
        return torch.ops.aten.corrcoef.default(input)
    c = torch.cov(input)
    if c.dim() == 0:  # nan where c is nan, inf or 0, else 1
        return c / c
    d = c.diagonal()
    stddev = torch.sqrt(torch.real(d) if d.is_complex() else d)
    c = c / stddev.view(-1, 1)
    c = c / stddev.view(1, -1)
    if c.is_complex():
        return torch.complex(torch.real(c).clip(-1, 1), torch.imag(c).clip(-1, 1))
    return c.clip(-1, 1)


REGISTRY = {torch.cov: cov_, torch.corrcoef: corrcoef_}
