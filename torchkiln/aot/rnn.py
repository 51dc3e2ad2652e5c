"""LSTMs in training traces as one ``aten.mkldnn_rnn_layer`` per layer and direction.

torch's LSTM decomposition uses the oneDNN layer op only for inference (``train=False``,
no workspace for the backward) and otherwise unrolls every time step into ~40 ATen ops
forward and backward, which makes a 92-step bidirectional LSTM take a minute to trace.
While a joint graph is traced, :class:`TrainingLSTM` intercepts ``torch._VF.lstm`` on
CPU float32/bfloat16 tensors (no projections, not packed) and builds the same LSTM from
``mkldnn_rnn_layer(..., train=True)``, whose autograd formula is
``mkldnn_rnn_layer_backward``.  Anything else goes to torch unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten
_LSTM_MODE = 2  # ideep::rnn_kind::LSTM


def _supported(input, hx, params) -> bool:
    if not isinstance(hx, (list, tuple)) or len(hx) != 2 or not torch.backends.mkldnn.is_available():
        return False
    tensors = [input, *hx, *params]
    if any(not isinstance(t, torch.Tensor) or t.device.type != "cpu" for t in tensors):
        return False
    if len({t.dtype for t in tensors}) != 1 or input.dtype not in (torch.float32, torch.bfloat16):
        return False
    return input.dim() == 3 and hx[0].size(2) == hx[1].size(2)  # no projections


def lstm_from_onednn_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """``torch._VF.lstm`` (unpacked input) built from oneDNN LSTM layers with a workspace."""
    h0, c0 = hx
    if batch_first:
        input = input.transpose(0, 1)
    num_dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    hidden = h0.size(2)
    layer_input, hs, cs = input, [], []
    for layer in range(num_layers):
        outs = []
        for direction in range(num_dirs):
            idx = layer * num_dirs + direction
            w = params[idx * per:(idx + 1) * per]
            w_ih, w_hh = w[0], w[1]
            if has_biases:
                b_ih, b_hh = w[2], w[3]
            else:
                b_ih = torch.zeros(w_ih.size(0), dtype=w_ih.dtype, device=w_ih.device)
                b_hh = torch.zeros(w_hh.size(0), dtype=w_hh.dtype, device=w_hh.device)
            y, hy, cy, _ = aten.mkldnn_rnn_layer(
                layer_input.contiguous(), w_ih, w_hh, b_ih, b_hh,
                h0[idx:idx + 1].contiguous(), c0[idx:idx + 1].contiguous(),
                direction == 1, [], _LSTM_MODE, hidden, 1, has_biases, False, False, True)
            outs.append(y)
            hs.append(hy)
            cs.append(cy)
        layer_input = torch.cat(outs, dim=2) if num_dirs == 2 else outs[0]
        if dropout and train and layer < num_layers - 1:
            layer_input = F.dropout(layer_input, dropout, True)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    return output, torch.cat(hs, 0), torch.cat(cs, 0)


class TrainingLSTM(TorchFunctionMode):
    """Active while a joint graph (or its analysis) is traced."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch._VF.lstm and len(args) == 9 and not kwargs and _supported(args[0], args[1], args[2]):
            return lstm_from_onednn_layers(*args)
        return func(*args, **kwargs)
