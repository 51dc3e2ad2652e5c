"""Input mutations: detected by the analysis, functionalized in the graph, written back
by the runtime wrapper so that inputs look as they do after eager."""
import pytest
import torch

from torchkiln.aot import aot_function, nop

from ._helpers import GraphRecorder, check


def test_data_mutation_of_plain_input():
    def f(x, y):
        x.mul_(2)
        return x + y

    check(f, lambda: [torch.ones(3), torch.randn(3, requires_grad=True)])


def test_mutation_under_no_grad_of_parameter():
    def f(p, y):
        with torch.no_grad():
            p.add_(y)
        return y * p

    _, _, ref_args, res_args = check(f, lambda: [torch.nn.Parameter(torch.randn(4)), torch.randn(4, requires_grad=True)])
    assert res_args[0].is_leaf and res_args[0].grad_fn is None


def test_mutation_with_grad_of_non_leaf_input():
    def make():
        a = torch.randn(3, requires_grad=True)
        return [a * 1, torch.randn(3, requires_grad=True), a]

    def f(x, w, a):
        x.mul_(w)
        return x * w

    ref, res, ref_args, res_args = check(f, make, roots=lambda args: [args[1], args[2]])
    assert res_args[0].grad_fn is not None  # the input's history now includes the mutation


def test_mutation_makes_input_require_grad():
    def f(x, w):
        x.add_(w)
        return x.sin()

    _, _, ref_args, res_args = check(f, lambda: [torch.zeros(3), torch.randn(3, requires_grad=True)])
    assert res_args[0].requires_grad


def test_writes_through_expanded_view():
    def f(x):
        y = x.expand(3, *x.shape)
        y[0, 0].add_(5)
        return y

    check(f, lambda: [torch.arange(6)], backward=False)


def test_writes_through_expanded_view_backward():
    def f(x, z):
        y = x.expand(3, *x.shape)
        y[1, 1].mul_(5)
        return y * z

    check(f, lambda: [torch.arange(6, dtype=torch.float), torch.arange(6, dtype=torch.float).requires_grad_()])


def test_slice_assignment_into_input():
    def f(stack, scores):
        stack[:, :-1, :, 4:] = scores[:, :, :4, :5]
        return (stack.view(1, 12, 8, 9),)

    check(f, lambda: [torch.randn(12, 2, 4, 9), torch.randn(12, 1, 8, 9)], backward=False)


def test_metadata_mutation():
    def f(x):
        x.t_()
        return x + 1

    _, _, ref_args, res_args = check(f, lambda: [torch.randn(2, 3)], backward=False)
    assert res_args[0].shape == (3, 2) and res_args[0].stride() == ref_args[0].stride()


def test_set_storage_mutation():
    def f(x, y):
        x.set_(y * 2)
        return x + 1

    _, _, ref_args, res_args = check(f, lambda: [torch.randn(2), torch.randn(5)], backward=False)
    assert res_args[0].shape == (5,)


def test_in_place_on_leaf_requiring_grad_raises_like_eager():
    def f(x):
        x.add_(1)
        return x

    with pytest.raises(RuntimeError, match="is being used in an in-place operation"):
        f(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="is being used in an in-place operation"):
        aot_function(f, nop)(torch.ones(2, requires_grad=True))


def test_set_on_leaf_requiring_grad_raises_like_eager():
    def f(x):
        x.set_(torch.ones(2))

    with pytest.raises(RuntimeError, match="is being used in an in-place operation"):
        aot_function(lambda x: (f(x), x * 1)[1], nop)(torch.ones(2, requires_grad=True))


def test_keep_inference_input_mutations_puts_copy_in_graph():
    rec = GraphRecorder()

    def f(x):
        x.mul_(3)
        return x.sin()

    g = aot_function(f, rec, keep_inference_input_mutations=True)
    x, x_ref = torch.randn(4), None
    x_ref = x.clone()
    out = g(x)
    torch.testing.assert_close(out, f(x_ref))
    torch.testing.assert_close(x, x_ref)
    targets = [n.target for n in rec.graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.copy_.default in targets
    assert len(out.shape) == 1 and not isinstance(out, (list, tuple))


def test_mutated_input_is_returned():
    def f(x):
        x.add_(1)
        return x

    _, res, _, res_args = check(f, lambda: [torch.randn(3)], backward=False)
    assert res is res_args[0]


def test_mutated_input_aliasing_another_input_runs_eagerly():
    def f(a, b):
        a.add_(1)
        return b * 2

    g = aot_function(f, nop)
    base, base_ref = torch.zeros(2, 3), torch.zeros(2, 3)
    out = g(base, base[0])
    ref = f(base_ref, base_ref[0])
    torch.testing.assert_close(out, ref)  # b sees a's update, as in eager
    torch.testing.assert_close(base, base_ref)
    x, y = torch.zeros(3), torch.zeros(3)
    torch.testing.assert_close(g(x, y), torch.zeros(3))  # the compiled path for unaliased inputs


def test_saved_input_mutated_under_no_grad_after_use_in_graph():
    # The partitioner may save the pre-mutation input and recompute from it in the
    # backward; the runtime keeps that value even though the epilogue overwrites the input.
    def f(x, w):
        with torch.no_grad():
            x.add_(1)
        return (x * w).sin()

    for partition in ("default", "min_cut"):
        from torchkiln.aot import default_partition, min_cut_rematerialization_partition

        fn = default_partition if partition == "default" else min_cut_rematerialization_partition
        check(f, lambda: [torch.randn(3), torch.randn(3, requires_grad=True)], partition_fn=fn)


ASSORTED = {
    "index_put_on_clone": (lambda x, i, v: x.clone().index_put_((i,), v),
                           lambda: [torch.randn(5, requires_grad=True), torch.tensor([0, 3]), torch.randn(2, requires_grad=True)]),
    "scatter_into_input": (lambda x, i: (x.scatter_(0, i, 1.0), x * 2)[1], lambda: [torch.randn(5), torch.tensor([1, 2])]),
    "masked_fill_through_view": (lambda x: (lambda y: (y[:, 0].masked_fill_(y[:, 0] > 0, 0.0), y.sum())[1])(x * 1),
                                 lambda: [torch.randn(3, 4, requires_grad=True)]),
    "boolean_setitem_on_input": (lambda x: (x.__setitem__(x > 0, 0.0), x + 1)[1], lambda: [torch.randn(6)]),
    "mutate_unbound_views": (lambda x: [t.add_(1) for t in x.unbind(0)] and x * 2, lambda: [torch.randn(3, 2)]),
    "resize_input": (lambda x: (x.resize_(2, 3), x + 1)[1], lambda: [torch.randn(6)]),
    "as_strided_view": (lambda x: x.as_strided((2, 2), (1, 2)).exp(), lambda: [torch.randn(6, requires_grad=True)]),
    "complex_views": (lambda x: torch.view_as_real(torch.view_as_complex(x) * 2).sum(), lambda: [torch.randn(3, 2, requires_grad=True)]),
    "zero_size": (lambda x: x.sum(0) * 2, lambda: [torch.randn(0, 3, requires_grad=True)]),
    "channels_last": (lambda x: torch.nn.functional.relu(x) * 2,
                      lambda: [torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last).requires_grad_()]),
}


@pytest.mark.parametrize("name", sorted(ASSORTED))
def test_assorted_mutations_and_views(name):
    fn, make = ASSORTED[name]
    check(fn, make)
