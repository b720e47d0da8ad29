"""Recurrent layers as PyTorch's CPU kernels compute them (``aten/src/ATen/native/RNN.cpp``).

``nn.RNN``/``nn.GRU``/``nn.LSTM`` and their cells call these (PyTorch's ``_VF.rnn_tanh``,
``_VF.lstm_cell`` ...), and record PyTorch's CPU graph:

* the cells, RNN and GRU layers, and float64 or projected LSTM layers are composed from the
  engine's ops in the order RNN.cpp composes them: ``AddmmBackward0`` for ``linear_hh``,
  ``AddBackward0`` for the sum of the gate pre-activations, ``UnsafeSplitBackward0`` for the gate
  chunks, ``SigmoidBackward0``/``TanhBackward0``/``MulBackward0`` for the gates; per layer one
  ``linear_ih`` over the whole sequence, unbound into steps, the outputs stacked, the two
  directions concatenated;
* a float32 LSTM layer without projection is one fused ``MkldnnRnnLayerBackward0`` node per
  layer and direction, as PyTorch's oneDNN path records it (NOTE [Fused LSTM layer]).

The one new public op is ``unsafe_split``/``unsafe_chunk`` (``UnsafeSplitBackward0``): split
whose pieces are not views.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.grad_mode import no_grad
from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, register, result, save, save_output, wrap_dim
from autodiag.ops.nn_ops import dropout, linear
from autodiag.ops.pointwise import relu, sigmoid, tanh
from autodiag.ops.shape import SplitBackward0, TransposeBackward0, cat, split, stack, unbind
from autodiag.trace.events import traced
from autodiag.trace.sites import note_saver

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


# ---------------------------------------------------------------------------------------------
# the fused LSTM layer (PyTorch's CPU path for float32: mkldnn_rnn_layer)
# ---------------------------------------------------------------------------------------------
# NOTE [Fused LSTM layer]
# On CPU, PyTorch runs a float32 LSTM without projections through oneDNN: one
# ``MkldnnRnnLayerBackward0`` node per layer and direction, with edges (input, w_ih, w_hh, b_ih,
# b_hh, hx, cx) and outputs (output, h_n, c_n). autodiag does the same with numpy: the forward
# loops over time keeping a workspace (the gate activations, c_t and tanh(c_t)), the backward
# is the textbook backpropagation through time over it, so a step costs a handful of array ops
# instead of a dozen recorded nodes. Under create_graph the backward recomputes the forward
# from the saved inputs with recorded ops and runs the same recursion on Tensors, so the
# gradients are themselves differentiable (PyTorch's fused node has a double backward too).
# float64 and proj_size take the composed path, as in PyTorch.


def _uses_fused_lstm(input, proj: bool) -> bool:
    return input._data.dtype == np.float32 and not proj and input._data.size != 0


class MkldnnRnnLayerBackward0(Node):
    __slots__ = ("reverse", "hidden_size", "_num_outputs")
    _saved_names = (
        "input",
        "weight0",
        "weight1",
        "weight2",
        "weight3",
        "hx_",
        "cx_",
        "result0",
        "result3",
    )

    def _apply(self, xp, grads):
        gout, ghy, gcy = grads
        x = self.saved_input(xp)
        w_ih, w_hh = self.saved_weight0(xp), self.saved_weight1(xp)
        h0, c0 = self.saved_hx_(xp), self.saved_cx_(xp)
        if xp.arrays:
            return _lstm_backward_arrays(
                self.needs_grad,
                gout,
                ghy,
                gcy,
                x,
                w_ih,
                w_hh,
                h0,
                c0,
                self.saved_result0(xp),
                self.saved_result3(xp),
                self.reverse,
            )
        b_ih, b_hh = self.saved_weight2(xp), self.saved_weight3(xp)
        return _lstm_backward_tensors(
            self.needs_grad, gout, ghy, gcy, x, w_ih, w_hh, b_ih, b_hh, h0, c0, self.reverse
        )

    def _saved_extra(self):
        return {
            "reverse": self.reverse,
            "hidden_size": self.hidden_size,
            "mode": 2,  # LSTM, in ATen's numbering
            "has_biases": True,
            "batch_first": False,
            "train": True,
        }


def _steps(T: int, reverse: bool):
    return range(T - 1, -1, -1) if reverse else range(T)


# NOTE [Fused LSTM layout]
# The arrays path works on transposed states, ``h`` and ``c`` as (H, B), so that each gate of
# a step is one contiguous (H, B) block of the gate pre-activations ``w_hh @ h + xw[t]``
# (4H, B): every per-step numpy call then runs over contiguous memory (on the (B, 4H) layout
# a gate is B strided rows, and each call pays per row). Two more tricks, both exact:
#   * the gates are laid out [i f o | g] (rows of the weights permuted once per call), so the
#     three sigmoids are one contiguous (3H, B) block and the tanh one (H, B) block;
#   * the sigmoid rows of the weights and bias are negated up front, so the pre-activations
#     come out as ``-z`` and ``sigmoid(z) = 1 / (1 + exp(-z))`` needs no negation per step
#     (negation is exact: ``(-w) @ h + (-b) == -(w @ h + b)`` bit for bit).
# The workspace saved for backward is one (T, 6H, B) array, per step [i f o g | c_t | tanh c_t].


# NOTE [Page faults]: a numpy temporary of the whole sequence's size (~180-700 kB here) freed at
# the top of glibc's heap is given back to the system and faulted in again by the next one; a
# training step of the LSTM benchmark made ~1,100 minor faults, 40% of its CPU time. So the
# forward writes the input projection into the workspace and the backward turns the gate
# factors into the gate gradients in place.


def _gate_order(H: int) -> np.ndarray:
    """Rows of PyTorch's [i f g o] gate layout in the workspace's [i f o g] order."""
    return np.r_[0 : 2 * H, 3 * H : 4 * H, 2 * H : 3 * H]


def _lstm_forward_arrays(x, w_ih, w_hh, b, h0, c0, reverse):
    """(output, h_n, c_n, workspace) of one direction (NOTE [Fused LSTM layout])."""
    T, B, _ = x.shape
    H = w_hh.shape[1]
    H3 = 3 * H
    order = _gate_order(H)
    sign = np.ones((4 * H, 1), dtype=x.dtype)
    sign[:H3] = -1
    w_ih_s, w_hh_s = w_ih[order] * sign, w_hh[order] * sign
    ws = np.empty((T, 6 * H, B), dtype=x.dtype)
    # the input projection of every step at once, written where each step's gates go
    # (NOTE: big temporaries cost page faults, see NOTE [Page faults])
    xw = np.matmul(w_ih_s, x.transpose(0, 2, 1), out=ws[:, : 4 * H])
    if b is not None:
        xw += b[order][:, None] * sign
    out_t = np.empty((T, H, B), dtype=x.dtype)
    h, c = np.ascontiguousarray(h0.T), np.ascontiguousarray(c0.T)
    with np.errstate(over="ignore"):  # exp(-z) = inf for very negative z: sigmoid 0, exact
        for t in _steps(T, reverse):
            a = ws[t]
            gates = a[: 4 * H]
            gates += w_hh_s @ h
            sig = gates[:H3]  # -z of i, f, o
            np.exp(sig, out=sig)
            sig += 1
            np.reciprocal(sig, out=sig)
            g = np.tanh(gates[H3:], out=gates[H3:])
            c_new = np.multiply(gates[H : 2 * H], c, out=a[4 * H : 5 * H])  # f * c
            c_new += gates[:H] * g  # + i * g
            c = c_new
            h = np.multiply(gates[2 * H : H3], np.tanh(c, out=a[5 * H :]), out=out_t[t])
    out = np.ascontiguousarray(out_t.transpose(0, 2, 1))
    return out, np.ascontiguousarray(h.T), np.ascontiguousarray(c.T), ws


def _lstm_backward_arrays(needs, gout, ghy, gcy, x, w_ih, w_hh, h0, c0, out, ws, reverse):
    T, B, _ = x.shape
    H = w_hh.shape[1]
    dtype = x.dtype
    # Everything that does not depend on the incoming gradient is computed for all steps at
    # once; the loop over time keeps only the recursion (dh, dc) and one matmul per step. The
    # states are (H, B) as in the forward (NOTE [Fused LSTM layout]); the gate gradients are
    # laid out in PyTorch's [i f g o] order, so that they multiply w_hh and w_ih as they are.
    i, f, o, g = ws[:, :H], ws[:, H : 2 * H], ws[:, 2 * H : 3 * H], ws[:, 3 * H : 4 * H]
    tc = ws[:, 5 * H :]
    # dG[t] = [dc * i' * g, dc * f' * c_prev, dc * g' * i, dh * o' * tanh(c)]: ``G`` first
    # holds the factors multiplying dc (gates i, f, g) and dh (gate o), each computed in place
    # (NOTE [Page faults]); the loop then multiplies them by dc and dh where they are
    G = np.empty((T, 4, H, B), dtype=dtype)
    for k, (act, times) in enumerate(((i, g), (f, None), (g, i), (o, tc))):
        p = G[:, k]
        if k == 2:  # tanh' = 1 - g * g
            np.multiply(act, act, out=p)
            np.subtract(1, p, out=p)
        else:  # sigmoid' = s * (1 - s)
            np.subtract(1, act, out=p)
            p *= act
        if times is not None:
            p *= times
    # f's factor is c_prev: the c of the step before in time order, c0 for the first step
    first, rest, before = (
        (-1, slice(0, -1), slice(1, None)) if reverse else (0, slice(1, None), slice(0, -1))
    )
    G[rest, 1] *= ws[before, 4 * H : 5 * H]
    G[first, 1] *= c0.T
    A = np.multiply(tc, tc)  # d c_t / d h_t (through h = o * tanh(c)): o * (1 - tanh(c)^2)
    np.subtract(1, A, out=A)
    A *= o
    # (copies: dh and dc are updated in place)
    dh = np.zeros((H, B), dtype) if ghy is None else ghy.T.copy()
    dc = np.zeros((H, B), dtype) if gcy is None else gcy.T.copy()
    gout_t = None if gout is None else gout.swapaxes(1, 2).copy()
    w_hh_t = np.ascontiguousarray(w_hh.T)
    tmp = np.empty((H, B), dtype=dtype)
    for t in _steps(T, not reverse):
        if gout_t is not None:
            dh += gout_t[t]
        dc += np.multiply(dh, A[t], out=tmp)
        d = G[t]
        d[:3] *= dc
        d[3] *= dh
        dc *= f[t]
        dh = w_hh_t @ d.reshape(4 * H, B)
    needs_x, needs_wih, needs_whh, needs_bih, needs_bhh, needs_h0, needs_c0 = needs
    # (T, 4H, B) -> rows of (T*B, 4H), as the products with the weights want them
    # (a copy of the swapped axes: np.ascontiguousarray takes twice as long on this layout)
    flat = G.reshape(T, 4 * H, B).swapaxes(1, 2).copy().reshape(T * B, -1)
    dx = dw_ih = dw_hh = db_ih = db_hh = None
    if needs_x:
        dx = (flat @ w_ih).reshape(x.shape)
    if needs_wih:
        dw_ih = flat.T @ x.reshape(T * B, -1)
    if needs_whh:
        if reverse:
            h_prev = np.concatenate([out[1:], h0[None]])
        else:
            h_prev = np.concatenate([h0[None], out[:-1]])
        dw_hh = flat.T @ h_prev.reshape(T * B, H)
    if needs_bih or needs_bhh:
        db = flat.sum(axis=0)
        db_ih = db if needs_bih else None
        db_hh = (db.copy() if needs_bih else db) if needs_bhh else None
    return (
        dx,
        dw_ih,
        dw_hh,
        db_ih,
        db_hh,
        np.ascontiguousarray(dh.T) if needs_h0 else None,
        np.ascontiguousarray(dc.T) if needs_c0 else None,
    )


def _lstm_backward_tensors(needs, gout, ghy, gcy, x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse):
    """The same recursion on recorded ops (create_graph): the forward is recomputed from the
    saved inputs so that the gradients depend on them differentiably."""
    from autodiag.ops.shape import transpose

    T = x.shape[0]
    H = w_hh.shape[1]
    xw = unbind(linear(x, w_ih, b_ih), 0)
    h, c = h0, c0
    cache = [None] * T
    for t in _steps(T, reverse):
        gates = linear(h, w_hh, b_hh) + xw[t]
        i, f, g, o = unsafe_chunk(gates, 4, 1)
        i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
        c_prev, h_prev = c, h
        c = f * c + i * g
        tc = tanh(c)
        h = o * tc
        cache[t] = (i, f, g, o, tc, c_prev, h_prev)
    dh = ghy if ghy is not None else h0.new_zeros(tuple(h0.shape))
    dc = gcy if gcy is not None else c0.new_zeros(tuple(c0.shape))
    dG = [None] * T
    for t in _steps(T, not reverse):
        i, f, g, o, tc, c_prev, _ = cache[t]
        if gout is not None:
            dh = dh + gout[t]
        dc = dc + dh * o * (1 - tc * tc)
        d = cat(
            [dc * g * (i * (1 - i)), dc * c_prev * (f * (1 - f)), dc * i * (1 - g * g)]
            + [dh * tc * (o * (1 - o))],
            1,
        )
        dc = dc * f
        dh = d.matmul(w_hh)
        dG[t] = d
    needs_x, needs_wih, needs_whh, needs_bih, needs_bhh, needs_h0, needs_c0 = needs
    flat = stack(dG, 0).reshape(-1, 4 * H)
    flat_t = transpose(flat, 0, 1)
    dx = flat.matmul(w_ih).reshape(tuple(x.shape)) if needs_x else None
    dw_ih = flat_t.matmul(x.reshape(-1, x.shape[2])) if needs_wih else None
    dw_hh = None
    if needs_whh:
        h_prev = stack([cache[t][6] for t in range(T)], 0).reshape(-1, H)
        dw_hh = flat_t.matmul(h_prev)
    db = flat.sum(0) if needs_bih or needs_bhh else None
    return (
        dx,
        dw_ih,
        dw_hh,
        db if needs_bih else None,
        db if needs_bhh else None,
        dh if needs_h0 else None,
        dc if needs_c0 else None,
    )


def _lstm_layer(x, params, h0, c0, reverse: bool):
    """One direction of a float32 LSTM layer as one fused node (NOTE [Fused LSTM layer]).
    Tracers see it as one op, ``mkldnn_rnn_layer`` (PyTorch's ``aten::mkldnn_rnn_layer``)."""
    w_ih, w_hh, b_ih, b_hh = params[:4]
    b = None
    if b_ih is not None:
        b = b_ih._data + b_hh._data
    out, hy, cy, ws = _lstm_forward_arrays(
        x._data, w_ih._data, w_hh._data, b, h0._data, c0._data, reverse
    )
    ins = (x, w_ih, w_hh, b_ih, b_hh, h0, c0)
    if not (_state.record and any(t is not None and t.requires_grad for t in ins)):
        return result(out, None), result(hy, None), result(cy, None)
    node = MkldnnRnnLayerBackward0(tuple(None if t is None else edge(t) for t in ins))
    node.reverse, node.hidden_size, node._num_outputs = reverse, w_hh.shape[1], 3
    outs = (result(out, node), result(hy, node), result(cy, node))
    outs[1]._output_nr, outs[2]._output_nr = 1, 2
    node._saved = (
        save(x),
        save(w_ih),
        save(w_hh),
        None if b_ih is None else save(b_ih),
        None if b_hh is None else save(b_hh),
        save(h0),
        save(c0),
        save_output(outs[0]),
        ws,
    )
    note_saver(node)  # NOTE [Saving sites]: a tuple result is not noted by the op wrapper
    return outs


_lstm_layer = traced("mkldnn_rnn_layer", _lstm_layer)


def _lstm_fused(input, hx, groups, num_layers, dropout_p, train, bidirectional, batch_first):
    """PyTorch's mkldnn_impl: per layer and direction one fused node; the states selected
    from h0/c0 by index, the final ones stacked."""
    for name, t in (("hx", hx[0]), ("cx", hx[1])):
        if t.dtype != input.dtype:
            # (PyTorch's oneDNN path fails here with "get_mkldnn_dtype: unsupported data type")
            raise RuntimeError(
                f"LSTM: {name} has dtype {t.dtype} but the input has dtype {input.dtype}; "
                f"pass initial states of the input's dtype"
            )
    x = input.transpose(0, 1).contiguous() if batch_first else input
    dirs = 2 if bidirectional else 1
    hys, cys = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            idx = layer * dirs + d
            out, hy, cy = _lstm_layer(x, groups[idx], hx[0][idx], hx[1][idx], d == 1)
            outs.append(out)
            hys.append(hy)
            cys.append(cy)
        x = outs[0] if dirs == 1 else cat(outs, -1)
        if dropout_p != 0 and train and layer < num_layers - 1:
            x = dropout(x, dropout_p, True)
    output = x.transpose(0, 1) if batch_first else x
    return output, stack(hys, 0), stack(cys, 0)


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

    if is_lstm and _uses_fused_lstm(input, proj):
        return _lstm_fused(
            input, hx, groups, num_layers, dropout_p, train, bidirectional, batch_first
        )
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
