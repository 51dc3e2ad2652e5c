"""OpInfo cases that still fail under torchkiln, and why (tests/codegen/test_opinfo.py).

Keys: ``(op name[.variant], dtype, "fwd" | "grad")``; dtype ``"*"`` covers every dtype.
None is a silent wrong result: each falls back to eager (a graph break, or a graph the
backend runs eagerly) with a warning.  This list only shrinks: an entry whose case
passes makes the test fail.  Built from the sweep's logs (TORCHKILN_OPINFO_LOG).
"""

EXPECTED_FAILURES: dict[tuple[str, str, str], str] = {
    ('argwhere', 'float32', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('argwhere', 'float64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('argwhere', 'int64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('combinations', 'bfloat16', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('combinations', 'float32', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('combinations', 'float64', 'grad'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('combinations', 'int64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('corrcoef', 'float32', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('corrcoef', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('cov', 'int64', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('equal', 'bfloat16', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('equal', 'int64', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('item', 'bfloat16', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('item', 'float64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('item', 'int64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('linalg.lstsq.grad_oriented', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('linalg.lstsq', 'float32', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('linalg.lstsq', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('masked_select', 'bool', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('masked_select', 'float64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('masked_select', 'float64', 'grad'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('masked_select', 'int64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('nn.functional.ctc_loss', 'float32', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('nn.functional.ctc_loss', 'float32', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('nn.functional.ctc_loss', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('nn.functional.gaussian_nll_loss', 'float32', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('nn.functional.gaussian_nll_loss', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('nn.functional.linear_cross_entropy.chunked_none', 'bfloat16', 'fwd'): 'graph break: UserDefinedObjectVariable(LinearCrossEntropyOptions) as an argument of a graph op',
    ('nn.functional.linear_cross_entropy.chunked_none', 'float32', 'fwd'): 'graph break: UserDefinedObjectVariable(LinearCrossEntropyOptions) as an argument of a graph op',
    ('nn.functional.linear_cross_entropy.chunked', 'float32', 'grad'): 'graph break: UserDefinedObjectVariable(LinearCrossEntropyOptions) as an argument of a graph op',
    ('nn.functional.triplet_margin_with_distance_loss', 'bfloat16', 'fwd'): 'graph break: NNModuleVariable(PairwiseDistance) as an argument of a graph op',
    ('nn.functional.triplet_margin_with_distance_loss', 'float64', 'grad'): 'graph break: NNModuleVariable(PairwiseDistance) as an argument of a graph op',
    ('sparse.mm.reduce', 'bfloat16', 'fwd'): 'sparse tensors: capture runs the frame eagerly',
    ('sparse.mm.reduce', 'float32', 'grad'): 'sparse tensors: capture runs the frame eagerly',
    ('sparse.mm.reduce', 'float64', 'grad'): 'sparse tensors: capture runs the frame eagerly',
    ('sparse.sampled_addmm', 'float32', 'grad'): 'sparse tensors: capture runs the frame eagerly',
    ('sparse.sampled_addmm', 'float64', 'grad'): 'sparse tensors: capture runs the frame eagerly',
    ('tensor_split', 'bfloat16', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('tensor_split', 'float32', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('tensor_split', 'float64', 'grad'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('tensor_split', 'int64', 'fwd'): 'graph break: data-dependent output or value (torch.compile also breaks without capture_scalar_outputs/capture_dynamic_output_shape_ops)',
    ('to_sparse', 'float64', 'grad'): 'RuntimeError: unsupported memory format option Contiguous',
    ('unique_consecutive', 'float64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
    ('unique_consecutive', 'int64', 'fwd'): 'codegen: data-dependent output sizes (nonzero, masked_select, unique, item) are not generated yet; the graph runs eagerly',
}
