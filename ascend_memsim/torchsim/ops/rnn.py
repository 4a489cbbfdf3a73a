"""Recurrent layers (``nn.RNN``, ``nn.GRU``, ``nn.LSTM``) on the fake NPU.

torch runs a recurrent layer on an accelerator step by step through its fused cells
(``aten::_thnn_fused_lstm_cell``, ``aten::_thnn_fused_gru_cell``, ATen's ``RNN.cpp``), which
keep for the backward, per step, the new hidden state and a workspace of the gates: LSTM
``hy``, ``cy`` and ``4 * hidden`` of gates, GRU ``hy`` and ``5 * hidden`` (torch's
``GRU_WORKSPACE_MULTIPLIER``). torch has a meta kernel for the LSTM cell and none for the GRU
cell, whose fake run then stops; :func:`register_rnn` gives the GRU cell and its backward the
shapes of torch's CUDA kernels (``aten/src/ATen/native/cuda/RNN.cu``,
``_thnn_fused_gru_cell_cuda`` and ``_thnn_fused_gru_cell_backward_cuda``): ``hy`` like
``hx`` and a ``(batch, 5 * hidden)`` workspace; the backward's input and hidden gate
gradients ``(batch, 3 * hidden)``, ``grad_hx`` like ``grad_hy``, and the two bias gradients
``(3 * hidden)`` when there are biases.

ESTIMATE: torch_npu runs these layers as CANN's DynamicRNN and DynamicGRUV2 operators
(``torch_npu.npu_lstm``, ``npu_gru``; hicann/ops-nn ``rnn/dynamic_rnn/op_host/op_api/
aclnn_lstm.cpp``), which keep whole-sequence tensors instead of per-step ones: for a GRU
layer six of ``(seq, batch, hidden)`` (y, output_h, update, reset, new, hidden_new: the same
six of ``hidden`` per step the fused cell keeps), for an LSTM layer eight (y, output_h,
output_c, i, j, f, o, tanhc: two of ``hidden`` per step more than the fused cell's six). So
an LSTM's saved activations are counted 6/8 of the NPU's, and each recurrent layer's in many
small blocks rather than a few large ones.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["register_rnn"]

#: torch's GRU_WORKSPACE_MULTIPLIER (aten/src/ATen/native/cuda/RNN.cu)
_GRU_WORKSPACE = 5
_registered: list[Any] = []


def _gru_cell(input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None,
              hidden_bias: Any = None) -> tuple[Any, Any]:
    hy = torch.empty_like(hx, memory_format=torch.contiguous_format)
    workspace = hx.new_empty((hx.size(0), hx.size(1) * _GRU_WORKSPACE))
    return hy, workspace


def _gru_cell_backward(grad_hy: Any, workspace: Any, has_bias: bool) -> tuple[Any, ...]:
    hidden = workspace.size(1) // _GRU_WORKSPACE
    grad_input_gates = workspace.new_empty((workspace.size(0), hidden * 3))
    grad_hidden_gates = workspace.new_empty((workspace.size(0), hidden * 3))
    grad_hx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0),
            grad_hidden_gates.sum(0))


def register_rnn() -> None:
    """Give the GRU cell and its backward meta kernels (once per process)."""
    if _registered:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_thnn_fused_gru_cell", _gru_cell, "Meta")
    lib.impl("_thnn_fused_gru_cell_backward", _gru_cell_backward, "Meta")
    _registered.append(lib)
