"""Settings of the code generator (``torchkiln.codegen.config``; mirrors ``torch._inductor.config``)."""
from __future__ import annotations

import os

from ..config import Config

config = Config(
    "torchkiln.codegen.config",
    # Raise compile errors instead of warning and running the graph eagerly.
    debug=False,
    # Ops without a lowering run their ATen kernel (counted in metrics.fallback_ops);
    # False raises instead (used by tests that check coverage).
    implicit_fallbacks=True,
    # Save compiled graphs by content (docs/codegen.md "Caching"); TORCHKILN_FX_GRAPH_CACHE=0 turns it off.
    fx_graph_cache=os.environ.get("TORCHKILN_FX_GRAPH_CACHE", "1") != "0",
    # Generator for CPU tensors: "cpp" (C++/OpenMP) or "triton" (TRITON_INTERPRET=1).
    cpu_backend="cpp",
    # Threads of the C++ kernels; None follows torch.get_num_threads() at call time.
    cpp_threads=None,
    # Outer loops are parallelized with OpenMP only above this many elements of work.
    cpp_parallel_min_work=32768,
    # C++ compiler and extra flags.
    cpp_cxx="g++",
    cpp_march_native=True,
    # A pointwise value read by several consumers is stored to memory (not recomputed)
    # when its expression has more operations than this.
    realize_ops_threshold=24,
    # ... or when it loads more buffers than this (graph._many_reads).
    realize_reads_threshold=4,
    # Indirect indices (gather, embedding, x[i], scatter, index_put...) are checked in
    # the kernels: out of range raises as in eager (IndexError/RuntimeError).  Read when
    # lowering; as torch._inductor.config.assert_indirect_indexing.
    assert_indirect_indexing=True,
    # Each generated kernel launch adds its wall time to wrapper_runtime.kernel_time (read when
    # the wrapper is written; `torchkiln bench --profile`); as torch's cpp.enable_kernel_profile.
    kernel_profile=False,
    # 2-d convolutions on CPU read and write channels-last, and the kernels between them
    # keep that layout (codegen/layout.py); as torch._inductor.config.layout_optimization.
    layout_optimization=True,
    # ... and on CUDA (TORCHKILN_CUDA_CHANNELS_LAST=0 turns it off): cuDNN's NHWC kernels
    # without its NCHW<->NHWC conversions, and the pointwise kernels between convolutions
    # walk NHWC memory in order (scheduler.loop_order).  H100: hf_resnet inference 51 -> 39
    # kernels a step (torch.compile 41) at the same GPU time; training 0.90x torch.compile's.
    layout_optimization_cuda=os.environ.get("TORCHKILN_CUDA_CHANNELS_LAST", "1") == "1",
    # Linear layers (addmm/mm of a transposed row-major weight) in float32 on CPU run
    # oneDNN's matmul, 5-12% faster than ATen's addmm here (codegen/mkldnn.py).
    mkldnn_linear=True,
    # ... only where M*K*N (multiply-adds) is at least this: oneDNN's fixed cost per call
    # (~12 us at one thread) loses below it (16x64x64: addmm 5 us, oneDNN 17 us; even at
    # 128x256x256).  Symbolic sizes count as large.
    mkldnn_linear_min_macs=1 << 23,
    # In no_grad inference, module parameters and buffers are constants: folded, batch
    # norm folded into convolutions, conv weights prepacked (codegen/freezing.py); changes
    # to them after compiling are not seen.  Off by default, as torch._inductor.config.freezing.
    freezing=False,
    # mode="reduce-overhead" also records training graphs (forward and backward), whose
    # outputs (saved tensors, gradients) are replayed over only once nothing uses them
    # (codegen/cudagraphs.py); off: they run without CUDA graphs (a perf_hints reason).
    cudagraphs_training=True,
    # On CUDA, a reduction with few outputs and long rows (bias and norm-weight gradients,
    # batch-norm statistics, full sums) runs as two reductions, the first over chunks of
    # the rows (codegen/split_reduction.py); as torch._inductor.config.split_reductions.
    split_reductions=True,
    # On CUDA, addmm whose uses are all pointwise runs as mm + the bias add fused into
    # them (lowering._prefer_unfused_addmm); as torch._inductor's unfuse_bias_add_to_pointwise.
    unfuse_bias_addmm=True,
)


def triton_kernels(device) -> bool:
    """Whether graphs on ``device`` (a ``torch.device``) get Triton kernels: CUDA, or the
    CPU with ``cpu_backend="triton"`` (Triton's interpreter)."""
    return device.type == "cuda" or (device.type == "cpu" and config.cpu_backend == "triton")
