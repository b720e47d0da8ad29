"""Recurrent layers as PyTorch's CPU kernels compose them (``aten/src/ATen/native/RNN.cpp``).

``nn.RNN``/``nn.GRU``/``nn.LSTM`` and their cells call these (PyTorch's ``_VF.rnn_tanh``,
``_VF.lstm_cell`` ...). Every cell is built from the engine's own ops in the order RNN.cpp builds
it, so the graph is PyTorch's: ``AddmmBackward0`` for ``linear_hh``, ``AddBackward0`` for the sum
of the gate pre-activations, ``UnsafeSplitBackward0`` for the gate chunks, ``SigmoidBackward0`` /
``TanhBackward0`` / ``MulBackward0`` for the gates; per layer one ``linear_ih`` over the whole
sequence (``ViewBackward0``/``AddmmBackward0``) unbound into steps, the step outputs stacked, the
two directions concatenated. The one place the names differ: PyTorch records an LSTM *layer* on
CPU as one fused ``MkldnnRnnLayerBackward0`` node (oneDNN); here it is the composed cells, which
is what PyTorch itself records with oneDNN off. Values and gradients are the same.

The only new op is ``unsafe_split``/``unsafe_chunk`` (``UnsafeSplitBackward0``): split whose
pieces are not tracked as views.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.grad_mode import no_grad
from autodiag.ops._core import _state, edge, register, result, wrap_dim
from autodiag.ops.nn_ops import dropout, linear
from autodiag.ops.pointwise import relu, sigmoid, tanh
from autodiag.ops.shape import SplitBackward0, TransposeBackward0, cat, split, stack, unbind

# ---------------------------------------------------------------------------------------------
# unsafe_split / unsafe_chunk: split without view tracking (ATen's gates use it)
# ---------------------------------------------------------------------------------------------


class UnsafeSplitBackward0(SplitBackward0):
    __slots__ = ()


class UnsafeSplitWithSizesBackward0(SplitBackward0):
    __slots__ = ()


@register()
def unsafe_split(tensor, split_size: int, dim: int = 0):
    """``split`` whose pieces are fresh tensors, not views of ``tensor`` (PyTorch's
    ``unsafe_split``: the gates of an LSTM/GRU cell are cut this way).

    >>> import autodiag as torch
    >>> x = torch.arange(6.0, requires_grad=True)
    >>> a, b = torch.unsafe_split(x, 3)
    >>> a.grad_fn.name(), a._base is None
    ('UnsafeSplitBackward0', True)
    """
    if isinstance(split_size, bool) or not isinstance(split_size, (int, np.integer)):
        raise TypeError(
            f"unsafe_split(): argument 'split_size' must be int, not {type(split_size).__name__}"
        )
    # the sizes, dim and errors are split's; only the outputs' nature and the node differ
    return _unsafe_pieces(tensor, int(split_size), dim)


def _unsafe_pieces(tensor, sizes, dim: int, cls=UnsafeSplitBackward0):
    with no_grad():
        pieces = split(tensor, sizes, dim)
    d = tensor._data
    dim = wrap_dim(dim, d.ndim)
    node = None
    if _state.record and tensor.requires_grad:
        node = cls((edge(tensor),))
        node.dim, node.in_shape = dim, d.shape
        node.sizes = tuple(p._data.shape[dim] for p in pieces)
        node._num_outputs = len(pieces)
    outs = []
    for i, p in enumerate(pieces):
        # NOTE: a copy, so that writing into a piece can never reach ``tensor`` unseen
        t = result(p._data.copy(), node)
        if node is not None:
            t._output_nr = i
        outs.append(t)
    return tuple(outs)


@register()
def unsafe_chunk(input, chunks: int, dim: int = 0):
    """``chunk`` into fresh tensors (``UnsafeSplitBackward0``), as ``unsafe_split``."""
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input._data.shape[wrap_dim(dim, input.ndim)]
    if n == 0:
        # ATen: ``chunks`` empty pieces, through unsafe_split_with_sizes
        return _unsafe_pieces(input, [0] * chunks, dim, UnsafeSplitWithSizesBackward0)
    return unsafe_split(input, -(-n // chunks), dim)


# ---------------------------------------------------------------------------------------------
# the cells (RNN.cpp's SimpleCell, LSTMCell, GRUCell)
# ---------------------------------------------------------------------------------------------
# ``params`` is (w_ih, w_hh, b_ih, b_hh, w_hr): biases and w_hr may be None. ``pre`` says that
# ``x`` is already ``linear_ih(x)`` (a layer computes it for the whole sequence at once).


def _tanh_cell(x, h, params, pre=False):
    ih = x if pre else linear(x, params[0], params[2])
    return tanh(linear(h, params[1], params[3]) + ih)


def _relu_cell(x, h, params, pre=False):
    ih = x if pre else linear(x, params[0], params[2])
    return relu(linear(h, params[1], params[3]) + ih)


def _lstm_cell(x, hidden, params, pre=False):
    hx, cx = hidden
    gates = linear(hx, params[1], params[3]) + (x if pre else linear(x, params[0], params[2]))
    i, f, g, o = unsafe_chunk(gates, 4, 1)
    i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    cy = f * cx + i * g
    hy = o * tanh(cy)
    if params[4] is not None:  # proj_size: h is projected (PyTorch's matmul_hr)
        hy = hy.matmul(params[4].t())
    return hy, cy


def _gru_cell(x, h, params, pre=False):
    ig = unsafe_chunk(x if pre else linear(x, params[0], params[2]), 3, 1)
    hg = unsafe_chunk(linear(h, params[1], params[3]), 3, 1)
    reset = sigmoid(hg[0] + ig[0])
    update = sigmoid(hg[1] + ig[1])
    new = tanh(ig[2] + hg[2] * reset)
    return (h - new) * update + new


CELLS = {"RNN_TANH": _tanh_cell, "RNN_RELU": _relu_cell, "LSTM": _lstm_cell, "GRU": _gru_cell}


def _check_cell_input(name, x, input_size):
    if x.shape[1] != input_size:
        raise RuntimeError(
            f"input has inconsistent input_size: got {x.shape[1]} expected {input_size}"
        )


def _check_cell_hidden(x, h, hidden_size, label):
    if x.shape[0] != h.shape[0]:
        raise RuntimeError(
            f"Input batch size {x.shape[0]} doesn't match hidden{label} batch size {h.shape[0]}"
        )
    if h.shape[1] != hidden_size:
        raise RuntimeError(
            f"hidden{label} has inconsistent hidden_size: got {h.shape[1]}, expected {hidden_size}"
        )


def cell(mode: str, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One step of a cell on a 2-d batch (``_VF.rnn_tanh_cell``, ``_VF.lstm_cell`` ...); ``hx``
    is ``(h, c)`` for an LSTM. Returns ``h'`` (``(h', c')`` for an LSTM)."""
    _check_cell_input(mode, input, w_ih.shape[1])
    hidden_size = w_hh.shape[1]
    if mode == "LSTM":
        _check_cell_hidden(input, hx[0], hidden_size, 0)
        _check_cell_hidden(input, hx[1], hidden_size, 1)
    else:
        _check_cell_hidden(input, hx, hidden_size, 0)
    return CELLS[mode](input, hx, (w_ih, w_hh, b_ih, b_hh, None))


# ---------------------------------------------------------------------------------------------
# layers (RNN.cpp's FullLayer, FullBidirectionalLayer, apply_layer_stack, _rnn_impl)
# ---------------------------------------------------------------------------------------------


def _run_layer(step, steps, hidden, params, is_lstm):
    outs = []
    for x in steps:
        hidden = step(x, hidden, params, True)
        outs.append(hidden[0] if is_lstm else hidden)
    return outs, hidden


def _layer(step, x, hidden, params, is_lstm, reverse=False):
    """One direction over the whole sequence: the input projection at once, then the steps."""
    steps = unbind(linear(x, params[0], params[2]), 0)
    if not steps:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    if reverse:
        steps = steps[::-1]
    outs, hidden = _run_layer(step, steps, hidden, params, is_lstm)
    if reverse:
        outs.reverse()
    return stack(outs, 0), hidden


class TransposeBackward1(TransposeBackward0):
    """PyTorch's node for ``transpose_`` (the batch_first output is transposed in place)."""

    __slots__ = ()


def _transposed_output(out):
    """``out.transpose_(0, 1)`` as PyTorch does it on the stacked output (a fresh tensor: the
    stacked one is internal, so nothing else sees the swap)."""
    node = None
    if _state.record and out.requires_grad:
        node = TransposeBackward1((edge(out),))
        node.dim0, node.dim1 = 0, 1
    return result(np.swapaxes(out._data, 0, 1), node)


def rnn(
    mode: str,
    input,
    hx,
    params,
    has_biases: bool,
    num_layers: int,
    dropout_p: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
    proj: bool = False,
):
    """A stack of recurrent layers (``_VF.rnn_tanh``/``rnn_relu``/``gru``/``lstm``) on a 3-d
    input. ``params`` is the module's flat weight list; ``hx`` is ``(h0, c0)`` for an LSTM.
    Returns ``(output, h_n)`` or, for an LSTM, ``(output, h_n, c_n)``."""
    step = CELLS[mode]
    is_lstm = mode == "LSTM"
    per = (4 if has_biases else 2) + (1 if proj else 0)
    groups = []
    for k in range(0, len(params), per):
        g = params[k : k + per]
        w_ih, w_hh = g[0], g[1]
        b_ih, b_hh = (g[2], g[3]) if has_biases else (None, None)
        groups.append((w_ih, w_hh, b_ih, b_hh, g[-1] if proj else None))

    x = input.transpose(0, 1) if batch_first else input
    if is_lstm:
        hs, cs = unbind(hx[0], 0), unbind(hx[1], 0)
        hiddens = list(zip(hs, cs))
    else:
        hiddens = list(unbind(hx, 0))

    dirs = 2 if bidirectional else 1
    finals = []
    for layer in range(num_layers):
        p = groups[layer * dirs]
        out, h = _layer(step, x, hiddens[layer * dirs], p, is_lstm)
        finals.append(h)
        if bidirectional:
            p = groups[layer * dirs + 1]
            rev, h = _layer(step, x, hiddens[layer * dirs + 1], p, is_lstm, reverse=True)
            finals.append(h)
            out = cat([out, rev], out.ndim - 1)
        x = out
        if dropout_p != 0 and train and layer < num_layers - 1:
            x = dropout(x, dropout_p, True)

    # NOTE: PyTorch's lstm() transposes the output back out of place (a view); rnn_tanh,
    # rnn_relu and gru transpose it in place (TransposeBackward1)
    if batch_first:
        output = x.transpose(0, 1) if is_lstm else _transposed_output(x)
    else:
        output = x
    if is_lstm:
        return output, stack([h for h, _ in finals], 0), stack([c for _, c in finals], 0)
    return output, stack(finals, 0)
