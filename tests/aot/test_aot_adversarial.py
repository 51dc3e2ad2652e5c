"""Adversarial cases for AOT autograd and functionalization, through the whole stack
(``torchkiln.compile`` with "aot_eager" and "inductor"): input mutations through views
and aliases, metadata mutations, outputs that alias inputs or each other, grad-mode
changes inside the frame, version counters.  Eager PyTorch is the oracle: outputs
(values, sizes, strides, requires_grad, grad_fn, leafness), inputs afterwards, object
identity between outputs and inputs, and the grads of every leaf.  Cases marked
(fixed) gave a wrong result before their fix."""
import pytest
import torch
import torch.utils._pytree as pytree

import torchkiln

BACKENDS = ["aot_eager", "inductor"]


def R(*s):
    return torch.randn(*s)


def G(*s):
    return torch.randn(*s, requires_grad=True)


def _desc(t):
    return (tuple(t.shape), t.dtype, t.stride(), t.storage_offset(), t.requires_grad, t.grad_fn is not None, t.is_leaf)


def _same(a, b, what):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), what
        assert _desc(a) == _desc(b), (what, _desc(a), _desc(b))
        torch.testing.assert_close(a.detach(), b.detach(), equal_nan=True, msg=what)
    else:
        assert a == b, (what, a, b)


def _identities(ts):
    return [(i, j, a is b, a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
            for i, a in enumerate(ts) for j, b in enumerate(ts)
            if j > i and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)]


def _loss(out):
    ts = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    return sum((t * (torch.arange(t.numel()).view_as(t) + 1.0)).sum() for t in ts) if ts else None


def check(fn, make, backend, after=None, grad=True):
    """``fn(*make())`` eagerly and compiled on identical inputs; ``after(out, args)`` runs
    on both results (a user's later mutation of an output, say) and is compared too."""
    torchkiln.reset()
    torch.manual_seed(0)
    ref_args = make()
    torch.manual_seed(0)
    res_args = make()
    ref = fn(*ref_args)
    res = torchkiln.compile(fn, backend=backend)(*res_args)
    ro, ko = pytree.tree_leaves(ref), pytree.tree_leaves(res)
    ra, ka = pytree.tree_leaves(ref_args), pytree.tree_leaves(res_args)
    assert len(ro) == len(ko)
    for i, (a, b) in enumerate(zip(ro, ko)):
        _same(a, b, f"output {i}")
    for i, (a, b) in enumerate(zip(ra, ka)):
        _same(a, b, f"input {i} afterwards")
    assert _identities(ro + ra) == _identities(ko + ka), "which outputs/inputs are one object or share memory"
    if after is not None:
        for i, (a, b) in enumerate(zip(pytree.tree_leaves(after(ref, ref_args)), pytree.tree_leaves(after(res, res_args)))):
            _same(a, b, f"after {i}")
    if grad:
        lr, lk = _loss(ref), _loss(res)
        assert (lr is None) == (lk is None)
        if lr is not None:
            try:
                lr.backward()
            except RuntimeError as e:  # eager's backward refuses (a saved tensor was overwritten)
                with pytest.raises(type(e)):
                    lk.backward()
                return
            lk.backward()
            for i, (a, b) in enumerate(zip(ra, ka)):
                if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad:
                    assert (a.grad is None) == (b.grad is None), f"grad of input {i}"
                    if a.grad is not None:
                        torch.testing.assert_close(a.grad, b.grad)


def _select_add(x):
    x[0].add_(1)
    return x * 2


def _two_outputs_without_grad(c, x):  # (fixed) all but the last output marked non-differentiable required grad
    c.add_(1)  # a buffer's update (``self.count += 1``) next to a differentiable output
    return x * 2, c.clone(), c * 3, x.sum().detach()


def _t_(x):  # (fixed) the input's fake kept the new metadata: inductor raised, sizes wrong
    x.t_()
    return x + 1


def _unsqueeze_(x):  # (fixed) the input came back with two new dims
    x.unsqueeze_(0)
    return x + 1


def _resize_shrink(x):  # (fixed) the input kept its old size
    x.resize_(2, 2)
    return x + 1


def _set_(x, y):  # (fixed) the input kept its storage
    x.set_(y)
    return x + 1


def _as_strided_(x):  # (fixed) the input kept its sizes
    x.as_strided_((2, 2), (1, 2))
    return x + 1


def _squeeze_then_add(x):  # (fixed) the input kept its size-1 dim
    x.squeeze_()
    x.add_(1)
    return x.shape


def _transpose_then_mul(x):  # (fixed) raised
    x.transpose_(0, 1)
    x.mul_(2)
    return x


def _as_strided_view_write(x):
    v = x.as_strided((2, 2), (1, 2), 1)
    v.mul_(10)
    return x.sum()


def _add_(x, y):
    x.add_(1)
    return x + y


def _mul_other(x, y):
    y.mul_(2)
    return x * 1


def _no_grad_leaf_view_write(x, w):
    with torch.no_grad():
        w[0].mul_(0.5)
    return x * w


def _data_write(x, w):  # (fixed) raised "a leaf Variable that requires grad ..."
    w.data.mul_(2)
    return x * w


def _detach_write(x, w):  # (fixed) raised "a leaf Variable that requires grad ..."
    w.detach().mul_(2)
    return x * w


def _data_assign(x, w):
    w.data = x * 3
    return x * w


def _requires_grad_on_detached(x):  # (fixed) the output did not require grad
    return x.detach().requires_grad_(True) * 2


def _requires_grad_intermediate(x):  # (fixed) the output was no leaf
    z = (x * 2).detach()
    z.requires_grad_()
    return z * x, z


def _new_leaf(x):
    t = torch.zeros(3).requires_grad_()
    return t * x, t


def _detach_output(x):  # (fixed) the output was the input object itself
    return x.detach()


def _detach_output_then_flag(x):  # (fixed) requires_grad_ on the output reached the input
    return x.detach().requires_grad_()


def _detach_then_view(x):  # (fixed) the view was regenerated from x under no_grad: it required grad
    return x.detach().view(3, 1), x * 2


def _identity_after_in_place(x):  # (fixed) ``is`` was False after ``+=`` and ``add_``
    y = x
    y += 1
    z = x.add_(1)
    w = x * 2
    v = w.mul_(2)
    return y is x, z is x, v is w, torch.add(w, 1, out=w) is w, x.contiguous() is x, w


def _no_grad_and_enable_grad(x):
    with torch.no_grad():
        y = x * 2
    with torch.enable_grad():
        z = x * 3
    return y, z


def _view_before_mutation(x):
    y = x.view(2, 2)
    x.add_(1)
    return y


def _slice_write_return_input(x):
    x[1:].add_(1)
    return x


def _copy_broadcast_dtype(x, y):
    x.copy_(y)
    return x


def _setitem_expanded(x):
    x[0] = 5
    return x


def _self_alias_add(a, b):
    a.add_(b.flip(0))
    return a


def _in_place_flip_self(a):
    a.add_(a.flip(0))
    return a


def _mutate_after_saved(x, w):
    y = x @ w
    w.mul_(2)
    return y


def _mutate_nonleaf_saved(x):
    y = x.sin()
    x.mul_(2)
    return y


def _chunk_write(x):
    a, b = x.chunk(2)
    a.mul_(b)
    return x


def _diagonal_fill(x):
    x.diagonal().fill_(0)
    return x.sum()


def _dtype_view_write(x):
    x.view(torch.int32).bitwise_and_(0x7FFFFFFF)
    return x


def _same_tensor_twice(x, y):
    x.mul_(2)
    y.add_(1)
    return x + y


def _index_add_dupes(x, i):
    x[i] += 1
    return x


def _index_put_accumulate(x, i):
    x.index_put_((i,), torch.tensor(1.0), accumulate=True)
    return x


def _list_input(xs):
    xs[0].add_(1)
    return xs[1] * 2


def _fill_int_with_float(x):
    x.fill_(1.5)
    return x


def _many_aliases(x):
    return x.t(), x.view(-1), x


def _two_views_of_intermediate(x):
    out = x * 2
    return out[0], out[1]


def _outputs_view_each_other(x):
    y = x * 2
    return y, y.view(-1), y[1]


def _pair(b0, b1):
    return lambda: (lambda t: [t[b0[0]:b0[1]], t[b1[0]:b1[1]]])(R(6))


CASES = {
    "select_add": (_select_add, lambda: [R(3, 4)]),
    "two_outputs_without_grad": (_two_outputs_without_grad, lambda: [R(()), G(3)]),
    # (fixed) the joint graph's CSE merged equal outputs: one object returned twice, or sharing memory
    "equal_outputs_stay_apart": (lambda x: (x * 2, x * 2, (x * 2).detach(), x.sin(), x.sin().t()), lambda: [G(2, 3)]),
    "t_": (_t_, lambda: [R(3, 4)]),
    "unsqueeze_": (_unsqueeze_, lambda: [R(3, 4)]),
    "resize_shrink": (_resize_shrink, lambda: [R(3, 4)]),
    "set_": (_set_, lambda: [R(3, 4), R(5)]),
    "as_strided_": (_as_strided_, lambda: [R(6)]),
    "squeeze_then_add": (_squeeze_then_add, lambda: [R(1, 3)]),
    "transpose_then_mul": (_transpose_then_mul, lambda: [R(2, 3)]),
    "as_strided_view_write": (_as_strided_view_write, lambda: [R(3, 4)]),
    "disjoint_alias_inputs": (_add_, _pair((0, 3), (3, 6))),
    "overlapping_alias_inputs": (_add_, _pair((0, 4), (2, 6))),
    "mutate_alias_read_other": (_mul_other, lambda: (lambda b: [b, b.view(2, 3)])(R(6))),
    "no_grad_leaf_view_write": (_no_grad_leaf_view_write, lambda: [R(3), G(3)]),
    "data_write": (_data_write, lambda: [R(3), G(3)]),
    "detach_write": (_detach_write, lambda: [R(3), G(3)]),
    "data_assign": (_data_assign, lambda: [R(3), G(3)]),
    "requires_grad_on_detached": (_requires_grad_on_detached, lambda: [R(3)]),
    "requires_grad_intermediate": (_requires_grad_intermediate, lambda: [G(3)]),
    "new_leaf": (_new_leaf, lambda: [R(3)]),
    "detach_output": (_detach_output, lambda: [R(3)]),
    "detach_output_then_flag": (_detach_output_then_flag, lambda: [R(3)]),
    "detach_then_view": (_detach_then_view, lambda: [G(3)]),
    "identity_after_in_place": (_identity_after_in_place, lambda: [R(2)]),
    "no_grad_and_enable_grad": (_no_grad_and_enable_grad, lambda: [G(3)]),
    "view_before_mutation": (_view_before_mutation, lambda: [R(4)]),
    "slice_write_return_input": (_slice_write_return_input, lambda: [R(4)]),
    "copy_broadcast_dtype": (_copy_broadcast_dtype, lambda: [torch.zeros(2, 3, dtype=torch.float64), torch.arange(3)]),
    "setitem_expanded": (_setitem_expanded, lambda: [R(3).expand(2, 3)]),
    "self_alias_add": (_self_alias_add, lambda: (lambda t: [t, t])(R(3))),
    "in_place_flip_self": (_in_place_flip_self, lambda: [R(5)]),
    "mutate_after_saved": (_mutate_after_saved, lambda: [G(2, 3), R(3, 2)]),
    "mutate_nonleaf_saved": (_mutate_nonleaf_saved, lambda: [G(3) * 1]),
    "chunk_write": (_chunk_write, lambda: [R(4)]),
    "diagonal_fill": (_diagonal_fill, lambda: [R(3, 3)]),
    "dtype_view_write": (_dtype_view_write, lambda: [R(4)]),
    "same_tensor_twice": (_same_tensor_twice, lambda: (lambda t: [t, t])(R(4))),
    "index_add_dupes": (_index_add_dupes, lambda: [torch.zeros(4), torch.tensor([1, 1, 2])]),
    "index_put_accumulate": (_index_put_accumulate, lambda: [torch.zeros(4), torch.tensor([1, 1, -1])]),
    "list_input": (_list_input, lambda: [[R(2), R(2)]]),
    "fill_int_with_float": (_fill_int_with_float, lambda: [torch.zeros(3, dtype=torch.int64)]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_mutation_and_alias(name, backend):
    fn, make = CASES[name]
    check(fn, make, backend)


AFTER = {
    # the user mutates an output that aliases an input / another output
    "alias_input_mutated_later": (lambda x: (x.view(-1), x[0]), lambda: [R(2, 3)],
                                  lambda o, a: (o[0].mul_(3), a[0].clone(), o[1].clone())),
    "outputs_alias_each_other": (_outputs_view_each_other, lambda: [R(2, 3)],
                                 lambda o, a: (o[1].add_(1), o[0].clone(), o[2].clone())),
    "grad_outputs_alias_each_other": (lambda x: (lambda y: (y, y.view(-1)))(x * 2), lambda: [G(2, 3)],
                                      lambda o, a: (o[1].add_(1), o[0].clone())),
    "many_aliases": (_many_aliases, lambda: [G(2, 2)], lambda o, a: (o[2].data.add_(1), o[0].clone(), o[1].clone())),
    "two_views_of_intermediate": (_two_views_of_intermediate, lambda: [G(2, 3)],
                                  lambda o, a: (o[0].add_(1), o[0].clone(), o[1].clone())),
    "view_of_dropped_intermediate": (lambda x: (x * 2)[0], lambda: [R(2, 3)],
                                     lambda o, a: (o._base is not None, tuple(o._base.shape))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(AFTER))
def test_outputs_mutated_by_the_user(name, backend):
    fn, make, after = AFTER[name]
    check(fn, make, backend, after=after)


@pytest.mark.parametrize("backend", BACKENDS)
def test_retain_grad_inside_the_frame(backend):  # (fixed) .grad stayed None
    def f(x):
        y = x * 2
        y.retain_grad()
        return y.sum(), y

    x = G(3)
    out, y = torchkiln.compile(f, backend=backend)(x)
    out.backward()
    torch.testing.assert_close(y.grad, torch.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_enable_grad_inside_a_no_grad_call(backend):  # (fixed) the outputs did not require grad
    def f(x, w):
        with torch.enable_grad():
            return x * w, x + 1

    def g(x, w):
        torch.set_grad_enabled(True)
        return x * w

    x, w = R(3), G(3)
    with torch.no_grad():
        out, plain = torchkiln.compile(f, backend=backend)(x, w)
        assert not torch.is_grad_enabled()
    assert out.requires_grad and not plain.requires_grad
    out.sum().backward()
    torch.testing.assert_close(w.grad, x)
    torchkiln.reset()
    try:
        with torch.no_grad():
            out = torchkiln.compile(g, backend=backend)(x, w)
            assert torch.is_grad_enabled()  # the function's own switch persists, as in eager
            torch.set_grad_enabled(False)
    finally:
        torch.set_grad_enabled(True)
    assert out.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_bumps_the_version_counter(backend):  # (fixed) inductor's in-graph write did not
    w, x = G(3), R(3)
    y = (w * x).sum()  # saves x for the backward

    def f(x):
        x.mul_(2)
        return x.sum()

    v0 = x._version
    torchkiln.compile(f, backend=backend)(x)
    assert x._version > v0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.xfail(reason="Tensor._version is a graph break and a graph's outputs are new tensors: the count of "
                          "in-place ops done inside the graph on a tensor it creates is lost (a debugging value)")
def test_version_of_a_tensor_made_in_the_frame():
    def f(x):
        y = x.clone()
        y.add_(1)
        return y._version

    assert torchkiln.compile(f, backend="aot_eager")(R(3)) == f(R(3))


@pytest.mark.xfail(reason="functionalization turns the write into a functional copy: eager's refusal of a copy_ "
                          "between overlapping memory is not reproduced (torch.compile computes a value too)")
def test_overlapping_copy_raises_as_eager():
    def f(a):
        a[1:].copy_(a[:-1])
        return a

    with pytest.raises(RuntimeError):
        f(R(5))
    with pytest.raises(RuntimeError):
        torchkiln.compile(f, backend="aot_eager")(R(5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_in_place_with_float_operand_raises_as_eager(backend):
    # (fixed) functionalization made mul_ a mul and a copy_ (which casts): no error
    def f(x, y):
        x.mul_(y)
        return x

    def g(x):
        x.add_(1.5)
        return x

    x = torch.ones(3, dtype=torch.int64)
    for fn, args in ((f, (x, torch.ones(3))), (g, (x,))):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            fn(*args)
        torchkiln.reset()
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            torchkiln.compile(fn, backend=backend)(*args)
    torch.testing.assert_close(torchkiln.compile(lambda a: a.mul_(2.0) * 1, backend=backend)(torch.ones(2)),
                               torch.full((2,), 2.0))
