"""Packed sequences: ``_pack_padded_sequence`` (PyTorch's ``PackPaddedSequenceBackward0`` node),
``_pad_packed_sequence`` (recorded as PyTorch records it: slice copies into a filled tensor),
and recurrent layers over a packed batch (RNN.cpp's ``PackedLayer``/``ReversedPackedLayer``).

A packed batch is time-major and sorted by decreasing length: ``data`` stacks, for each step
``t``, the ``batch_sizes[t]`` sequences still running. A forward layer runs the cell on the
first ``batch_sizes[t]`` rows of its hidden state and sets aside the rows of the sequences that
just ended, so each sequence's final state is the one at its own last step; the reversed layer
starts with the shortest batch and brings in the initial states of longer sequences as it walks
back. The cells are the composed ones of ``ops/recurrent.py`` (PyTorch's packed path does not
use the fused oneDNN LSTM either).
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, result
from autodiag.ops.factories import full, tensor, zeros
from autodiag.ops.nn_ops import dropout, linear
from autodiag.ops.recurrent import CELLS, _lstm_fused, _uses_fused_lstm
from autodiag.ops.shape import cat, stack, unbind
from autodiag.tensor import Tensor
from autodiag.trace.events import traced

# ---------------------------------------------------------------------------------------------
# packing
# ---------------------------------------------------------------------------------------------


def _rows(batch_sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time index, batch index) of each row of the packed data."""
    t = np.repeat(np.arange(len(batch_sizes)), batch_sizes)
    starts = np.repeat(np.cumsum(batch_sizes) - batch_sizes, batch_sizes)
    return t, np.arange(len(t)) - starts


class PackPaddedSequenceBackward0(Node):
    """Scatters the packed gradient back into a zero padded batch."""

    __slots__ = ("input_sizes", "batch_first", "batch_sizes")

    def backward(self, xp, g):
        shape = list(self.input_sizes)
        if self.batch_first:
            shape[0], shape[1] = shape[1], shape[0]
        if xp.arrays:
            out = np.zeros(shape, dtype=g.dtype)
            t, b = _rows(self.batch_sizes)
            out[t, b] = g
            return (np.swapaxes(out, 0, 1) if self.batch_first else out,)
        # create_graph: PyTorch's _pack_padded_sequence_backward, recorded (differentiable)
        out = zeros(shape, dtype=g.dtype)
        offset = 0
        for i, bs in enumerate(self.batch_sizes.tolist()):
            out.select(0, i).narrow(0, 0, bs).copy_(g.narrow(0, offset, bs))
            offset += bs
        return (out.transpose(0, 1) if self.batch_first else out,)

    def _saved_extra(self):
        return {"batch_first": self.batch_first, "input_sizes": tuple(self.input_sizes)}


def _pack_padded_sequence(input, lengths, batch_first: bool):
    """``(data, batch_sizes)`` of a padded batch whose sequence lengths (sorted decreasing,
    a 1-d int64 tensor) are ``lengths``."""
    lens = np.asarray(lengths._data, dtype=np.int64).reshape(-1)
    x = input._data
    if x.ndim < 2:
        raise RuntimeError(
            f"_pack_padded_sequence: expected input of at least 2 dims, got {x.ndim}-D"
        )
    xt = np.swapaxes(x, 0, 1) if batch_first else x
    if x.size == 0 and xt.shape[1] == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    batch_size = xt.shape[1]
    if lens.shape[0] != batch_size:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {lens.shape[0]} "
            f"(batch_size={batch_size})"
        )
    if lens[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in "
            "'lengths' that is <= 0"
        )
    if np.any(lens[1:] > lens[:-1]):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
            "to sidestep this requirement if you do not need ONNX exportability."
        )
    if lens[0] > xt.shape[0]:
        raise RuntimeError(
            f"Expected the longest sequence length to be at most the padded length "
            f"{xt.shape[0]}, but got {int(lens[0])}"
        )
    # batch_sizes[t] = how many sequences are longer than t
    batch_sizes = (lens[None, :] > np.arange(int(lens[0]))[:, None]).sum(1).astype(np.int64)
    t, b = _rows(batch_sizes)
    data = xt[t, b]
    node = None
    if _state.record and input.requires_grad:
        node = PackPaddedSequenceBackward0((edge(input),))
        node.input_sizes = tuple(x.shape)
        node.batch_first = bool(batch_first)
        node.batch_sizes = batch_sizes
    return result(data, node), tensor(batch_sizes)


_pack_padded_sequence = traced("_pack_padded_sequence", _pack_padded_sequence)


def _pad_packed_sequence(data, batch_sizes, batch_first: bool, padding_value, total_length):
    """``(padded, lengths)`` of packed ``data``; recorded as PyTorch's: each run of equal batch
    sizes is a slice of ``data``, viewed as (steps, batch, *) and copied into a filled tensor."""
    bs = [int(v) for v in np.asarray(batch_sizes._data).reshape(-1)]
    max_batch = bs[0]
    trailing = tuple(data.shape[1:])
    out = full((total_length, max_batch, *trailing), padding_value, dtype=data.dtype)
    offset, prev_i, prev_bs = 0, 0, bs[0]
    for i in range(len(bs) + 1):
        b = bs[i] if i < len(bs) else None
        if b != prev_bs:
            n = prev_bs * (i - prev_i)
            piece = data.narrow(0, offset, n).view(i - prev_i, prev_bs, *trailing)
            out.narrow(0, prev_i, i - prev_i).narrow(1, 0, prev_bs).copy_(piece)
            offset += n
            prev_i = i
        if b is not None:
            prev_bs = b
    if batch_first:
        out = out.transpose(0, 1)
    # a sequence's length: the number of steps whose batch includes it
    lengths = (np.asarray(bs)[None, :] > np.arange(max_batch)[:, None]).sum(1).astype(np.int64)
    return out, tensor(lengths)


# ---------------------------------------------------------------------------------------------
# recurrent layers over a packed batch
# ---------------------------------------------------------------------------------------------


def _slice(hidden, start: int, end: int, is_lstm: bool):
    if is_lstm:
        return (hidden[0].narrow(0, start, end - start), hidden[1].narrow(0, start, end - start))
    return hidden.narrow(0, start, end - start)


def _concat(hiddens, is_lstm: bool):
    if is_lstm:
        return (cat([h for h, _ in hiddens], 0), cat([c for _, c in hiddens], 0))
    return cat(hiddens, 0)


def _packed_layer(step, data, batch_sizes, hidden, params, is_lstm):
    """RNN.cpp's PackedLayer: (output data, final hidden of every sequence)."""
    x = linear(data, params[0], params[2])  # the input projection for all steps at once
    outs, finished = [], []
    offset, last = 0, batch_sizes[0]
    for bs in batch_sizes:
        step_input = x.narrow(0, offset, bs)
        offset += bs
        dec = last - bs
        if dec > 0:  # sequences that ended: keep their state
            finished.append(_slice(hidden, last - dec, last, is_lstm))
            hidden = _slice(hidden, 0, last - dec, is_lstm)
        last = bs
        hidden = step(step_input, hidden, params, True)
        outs.append(hidden[0] if is_lstm else hidden)
    finished.append(hidden)
    finished.reverse()
    return cat(outs, 0), _concat(finished, is_lstm)


def _reversed_packed_layer(step, data, batch_sizes, hidden0, params, is_lstm):
    """RNN.cpp's ReversedPackedLayer: from the last step back, sequences join with their
    initial state as the batch grows."""
    x = linear(data, params[0], params[2])
    outs = []
    offset = data.shape[0]
    last = batch_sizes[-1]
    hidden = _slice(hidden0, 0, last, is_lstm)
    for bs in reversed(batch_sizes):
        if bs > last:
            hidden = _concat([hidden, _slice(hidden0, last, bs, is_lstm)], is_lstm)
        step_input = x.narrow(0, offset - bs, bs)
        offset -= bs
        last = bs
        hidden = step(step_input, hidden, params, True)
        outs.append(hidden[0] if is_lstm else hidden)
    outs.reverse()
    return cat(outs, 0), hidden


def rnn_packed(
    mode: str,
    data,
    batch_sizes,
    hx,
    params,
    has_biases: bool,
    num_layers: int,
    dropout_p: float,
    train: bool,
    bidirectional: bool,
    proj: bool = False,
):
    """``_VF.rnn_tanh``/``rnn_relu``/``gru``/``lstm`` over packed ``data``: returns
    ``(output data, h_n)`` or, for an LSTM, ``(output data, h_n, c_n)``."""
    if not isinstance(data, Tensor):
        raise TypeError(f"{mode}: packed data must be a Tensor, got {type(data).__name__}")
    step = CELLS[mode]
    is_lstm = mode == "LSTM"
    sizes = [int(v) for v in np.asarray(batch_sizes._data).reshape(-1)]
    per = (4 if has_biases else 2) + (1 if proj else 0)
    groups = []
    for k in range(0, len(params), per):
        g = params[k : k + per]
        b_ih, b_hh = (g[2], g[3]) if has_biases else (None, None)
        groups.append((g[0], g[1], b_ih, b_hh, g[-1] if proj else None))
    if is_lstm and _uses_fused_lstm(data, proj) and len(set(sizes)) == 1:
        # NOTE: with every sequence of the same length the packed batch is a padded one, and
        # PyTorch's float32 LSTM takes its fused oneDNN path on data.view(T, B, *)
        x = data.view(len(sizes), sizes[0], data.shape[-1])
        out, h, c = _lstm_fused(x, hx, groups, num_layers, dropout_p, train, bidirectional, False)
        return out.view(-1, out.shape[-1]), h, c
    if is_lstm:
        hiddens = list(zip(unbind(hx[0], 0), unbind(hx[1], 0)))
    else:
        hiddens = list(unbind(hx, 0))
    dirs = 2 if bidirectional else 1
    x, finals = data, []
    for layer in range(num_layers):
        i = layer * dirs
        out, h = _packed_layer(step, x, sizes, hiddens[i], groups[i], is_lstm)
        finals.append(h)
        if bidirectional:
            rev, h = _reversed_packed_layer(step, x, sizes, hiddens[i + 1], groups[i + 1], is_lstm)
            finals.append(h)
            out = cat([out, rev], -1)
        x = out
        if dropout_p != 0 and train and layer < num_layers - 1:
            x = dropout(x, dropout_p, True)
    if is_lstm:
        return x, stack([h for h, _ in finals], 0), stack([c for _, c in finals], 0)
    return x, stack(finals, 0)
