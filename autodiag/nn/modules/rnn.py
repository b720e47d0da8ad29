"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, as ``torch.nn``.

Parameter names, shapes, order and initialisation (U(-1/sqrt(hidden), 1/sqrt(hidden)), the
same numbers as PyTorch's after ``manual_seed``) are PyTorch's; the computation is in
``autodiag.ops.recurrent``.

>>> import autodiag as torch
>>> lstm = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
>>> out, (h, c) = lstm(torch.zeros(5, 2, 3))
>>> tuple(out.shape), tuple(h.shape), list(lstm.state_dict())[:2]
((5, 2, 8), (4, 2, 4), ['weight_ih_l0', 'weight_hh_l0'])
"""

from __future__ import annotations

import math
import numbers

from autodiag import _warnings
from autodiag.nn import init
from autodiag.nn.modules.module import Module
from autodiag.nn.parameter import Parameter
from autodiag.ops import recurrent
from autodiag.ops.factories import empty, zeros

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


def _packed(input) -> bool:
    from autodiag.nn.utils.rnn import PackedSequence

    return isinstance(input, PackedSequence)


def _mini_batch(module, input, batch_sizes) -> int:
    """The batch size a recurrent layer expects its states to have (a packed batch's is its
    first step's)."""
    if batch_sizes is not None:
        return int(batch_sizes[0])
    return input.size(0) if module.batch_first else input.size(1)


def _type_check(name: str, value, kind) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{name} should be of type {kind.__name__}, got: {type(value).__name__}")


class RNNBase(Module):
    """What ``RNN``, ``LSTM`` and ``GRU`` share: the parameters, their checks and init."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1

        if (
            not isinstance(dropout, numbers.Number)
            or not 0 <= dropout <= 1
            or isinstance(dropout, bool)
        ):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of "
                "an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            _warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                "dropout expects num_layers greater than 1, but got "
                f"dropout={dropout} and num_layers={num_layers}"
            )
        _type_check("bias", bias, bool)
        _type_check("batch_first", batch_first, bool)
        _type_check("input_size", input_size, int)
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        _type_check("hidden_size", hidden_size, int)
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections"
            )
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        gates = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
        if mode not in gates:
            raise ValueError("Unrecognized RNN mode: " + mode)
        gate_size = gates[mode] * hidden_size

        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input_size = input_size if layer == 0 else real_hidden_size * num_directions
                shapes = [(gate_size, layer_input_size), (gate_size, real_hidden_size)]
                names = ["weight_ih_l{}{}", "weight_hh_l{}{}"]
                if bias:
                    shapes += [(gate_size,), (gate_size,)]
                    names += ["bias_ih_l{}{}", "bias_hh_l{}{}"]
                if proj_size > 0:
                    shapes.append((proj_size, hidden_size))
                    names.append("weight_hr_l{}{}")
                suffix = "_reverse" if direction == 1 else ""
                names = [n.format(layer, suffix) for n in names]
                for name, shape in zip(names, shapes):
                    setattr(self, name, Parameter(empty(*shape, dtype=dtype)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, n, None) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list:
        return [[getattr(self, w) for w in ws] for ws in self._all_weights]

    def flatten_parameters(self) -> None:
        """A no-op: autodiag keeps no fused weight buffer (PyTorch's is for cuDNN)."""

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    # --- checks (PyTorch's messages) -----------------------------------------------------

    def check_input(self, input, batch_sizes=None) -> None:
        w = self._flat_weights[0]
        if input.dtype != w.dtype:
            raise ValueError(
                f"RNN input dtype ({input.dtype}) does not match weight dtype ({w.dtype}). "
                f"Convert input: input.to({w.dtype}), or convert model: model.to({input.dtype})"
            )
        expected_input_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_input_dim:
            raise RuntimeError(
                f"input must have {expected_input_dim} dimensions, got {input.dim()}"
            )
        if self.input_size != input.size(-1):
            raise RuntimeError(
                "input.size(-1) must be equal to input_size. "
                f"Expected {self.input_size}, got {input.size(-1)}"
            )

    def get_expected_hidden_size(self, input, batch_sizes=None) -> tuple[int, int, int]:
        mini_batch = _mini_batch(self, input, batch_sizes)
        num_directions = 2 if self.bidirectional else 1
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * num_directions, mini_batch, size)

    def check_hidden_size(self, hx, expected, msg: str = "Expected hidden size {}, got {}"):
        if tuple(hx.size()) != tuple(expected):
            raise RuntimeError(msg.format(expected, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes=None) -> None:
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx, permutation):
        """``hx`` with its batch dim in ``permutation``'s order (a packed batch's sorting)."""
        if permutation is None:
            return hx
        return hx.index_select(1, permutation)

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # --- forward ---------------------------------------------------------------------------

    def _packed_forward(self, packed, hx):
        """A PackedSequence through the layers (PyTorch's packed path): the initial states
        permuted into the packing's order, the final ones permuted back."""
        from autodiag.nn.utils.rnn import PackedSequence
        from autodiag.ops.packed import rnn_packed

        input, batch_sizes, sorted_indices, unsorted_indices = packed
        is_lstm = self.mode == "LSTM"
        if hx is None:
            n = self.num_layers * (2 if self.bidirectional else 1)
            max_batch_size = int(batch_sizes[0])
            real = self.proj_size if self.proj_size > 0 else self.hidden_size
            h = zeros(n, max_batch_size, real, dtype=input.dtype)
            hx = (
                (h, zeros(n, max_batch_size, self.hidden_size, dtype=input.dtype)) if is_lstm else h
            )
        else:
            hx = self.permute_hidden(hx, sorted_indices)
        self.check_forward_args(input, hx, batch_sizes)
        out = rnn_packed(
            self.mode,
            input,
            batch_sizes,
            hx,
            self._flat_weights,
            self.bias,
            self.num_layers,
            self.dropout,
            self.training,
            self.bidirectional,
            proj=self.proj_size > 0,
        )
        hidden = (out[1], out[2]) if is_lstm else out[1]
        output = PackedSequence(out[0], batch_sizes, sorted_indices, unsorted_indices)
        return output, self.permute_hidden(hidden, unsorted_indices)

    def _batched(self, input, hx):
        """(input as 3-d, hx with a batch dim, is_batched) for the single-tensor-state
        layers, with PyTorch's checks."""
        name = "RNN" if self.mode.startswith("RNN") else self.mode
        if input.dim() not in (2, 3):
            what = (
                "2D or 3D, got {}D tensor instead" if name == "RNN" else "2D or 3D, got {}D instead"
            )
            raise ValueError(f"{name}: Expected input to be " + what.format(input.dim()))
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(
                        f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D "
                        "tensor"
                    )
                hx = hx.unsqueeze(1)
        elif hx is not None and hx.dim() != 3:
            raise RuntimeError(
                f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor"
            )
        if hx is None:
            max_batch_size = input.size(0) if self.batch_first else input.size(1)
            num_directions = 2 if self.bidirectional else 1
            hx = zeros(
                self.num_layers * num_directions,
                max_batch_size,
                self.hidden_size,
                dtype=input.dtype,
            )
        return input, hx, is_batched

    def _single_state_forward(self, input, hx):
        if _packed(input):
            return self._packed_forward(input, hx)
        input, hx, is_batched = self._batched(input, hx)
        self.check_forward_args(input, hx)
        output, hidden = recurrent.rnn(
            self.mode,
            input,
            hx,
            self._flat_weights,
            self.bias,
            self.num_layers,
            self.dropout,
            self.training,
            self.bidirectional,
            self.batch_first,
        )
        if not is_batched:
            output = output.squeeze(0 if self.batch_first else 1)
            hidden = hidden.squeeze(1)
        return output, hidden


class RNN(RNNBase):
    """An Elman RNN (tanh or relu): ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``.

    >>> import autodiag as torch
    >>> rnn = torch.nn.RNN(3, 4, nonlinearity="relu", batch_first=True)
    >>> out, h = rnn(torch.ones(2, 5, 3))
    >>> rnn, tuple(out.shape), tuple(h.shape), h.grad_fn.name()
    (RNN(3, 4, batch_first=True), (2, 5, 4), (1, 2, 4), 'StackBackward0')
    """

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(
                f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        super().__init__(mode, *args, **kwargs)

    def forward(self, input, hx=None):
        return self._single_state_forward(input, hx)


class GRU(RNNBase):
    """A gated recurrent unit layer (PyTorch's gate order: reset, update, new).

    >>> import autodiag as torch
    >>> gru = torch.nn.GRU(3, 4, num_layers=2)
    >>> [tuple(p.shape) for p in gru.parameters()][:2]
    [(12, 3), (12, 4)]
    """

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        return self._single_state_forward(input, hx)


class LSTM(RNNBase):
    """A long short-term memory layer (gate order: input, forget, cell, output), with
    ``proj_size`` projections as PyTorch's.

    As PyTorch on CPU, a float32 LSTM records one fused ``MkldnnRnnLayerBackward0`` node per
    layer and direction; float64 and ``proj_size`` record the composed cells.

    >>> import autodiag as torch
    >>> lstm = torch.nn.LSTM(3, 4)
    >>> out, (h, c) = lstm(torch.ones(5, 2, 3))
    >>> out.grad_fn.name(), c.grad_fn.name(), lstm.double()(torch.ones(5, 3).double())[0].grad_fn
    ('MkldnnRnnLayerBackward0', 'StackBackward0', <SqueezeBackward1 object at ...>)
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("LSTM", *args, **kwargs)

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return hx[0].index_select(1, permutation), hx[1].index_select(1, permutation)

    def get_expected_cell_size(self, input, batch_sizes=None) -> tuple[int, int, int]:
        mini_batch = _mini_batch(self, input, batch_sizes)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes=None) -> None:
        self.check_input(input, batch_sizes)
        self.check_hidden_size(
            hidden[0],
            self.get_expected_hidden_size(input, batch_sizes),
            "Expected hidden[0] size {}, got {}",
        )
        self.check_hidden_size(
            hidden[1],
            self.get_expected_cell_size(input, batch_sizes),
            "Expected hidden[1] size {}, got {}",
        )

    def forward(self, input, hx=None):
        if _packed(input):
            return self._packed_forward(input, hx)
        if input.dim() not in (2, 3):
            raise ValueError(f"LSTM: Expected input to be 2D or 3D, got {input.dim()}D instead")
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
        if hx is None:
            num_directions = 2 if self.bidirectional else 1
            max_batch_size = input.size(0) if self.batch_first else input.size(1)
            real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
            n = self.num_layers * num_directions
            hx = (
                zeros(n, max_batch_size, real_hidden_size, dtype=input.dtype),
                zeros(n, max_batch_size, self.hidden_size, dtype=input.dtype),
            )
        else:
            if is_batched:
                if hx[0].dim() != 3 or hx[1].dim() != 3:
                    raise RuntimeError(
                        "For batched 3-D input, hx and cx should also be 3-D but got "
                        f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors"
                    )
            else:
                if hx[0].dim() != 2 or hx[1].dim() != 2:
                    raise RuntimeError(
                        "For unbatched 2-D input, hx and cx should also be 2-D but got "
                        f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors"
                    )
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx)
        output, h, c = recurrent.rnn(
            "LSTM",
            input,
            hx,
            self._flat_weights,
            self.bias,
            self.num_layers,
            self.dropout,
            self.training,
            self.bidirectional,
            self.batch_first,
            proj=self.proj_size > 0,
        )
        if not is_batched:
            output = output.squeeze(batch_dim)
            h, c = h.squeeze(1), c.squeeze(1)
        return output, (h, c)


# ---------------------------------------------------------------------------------------------
# cells
# ---------------------------------------------------------------------------------------------


class RNNCellBase(Module):
    """What the cells share: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _step(self, mode: str, input, hx):
        """The single-state cells' forward (RNNCell, GRUCell), with PyTorch's checks."""
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if hx is not None and hx.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got {hx.dim()}D instead")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            hx = zeros(input.size(0), self.hidden_size, dtype=input.dtype)
        elif not is_batched:
            hx = hx.unsqueeze(0)
        ret = recurrent.cell(
            mode, input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh
        )
        return ret if is_batched else ret.squeeze(0)


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu).

    >>> import autodiag as torch
    >>> cell = torch.nn.RNNCell(3, 4)
    >>> cell(torch.ones(2, 3)).grad_fn.name()
    'TanhBackward0'
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=1, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._step(mode, input, hx)


class GRUCell(RNNCellBase):
    """One GRU step.

    >>> import autodiag as torch
    >>> torch.nn.GRUCell(3, 4)(torch.ones(3)).shape
    torch.Size([4])
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=3, dtype=dtype)

    def forward(self, input, hx=None):
        return self._step("GRU", input, hx)


class LSTMCell(RNNCellBase):
    """One LSTM step: returns ``(h', c')``.

    >>> import autodiag as torch
    >>> h, c = torch.nn.LSTMCell(3, 4)(torch.ones(2, 3))
    >>> h.grad_fn.name(), c.grad_fn.name()
    ('MulBackward0', 'AddBackward0')
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4, dtype=dtype)

    def forward(self, input, hx=None):
        if input.dim() not in (1, 2):
            raise ValueError(f"LSTMCell: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if hx is not None:
            for idx, value in enumerate(hx):
                if value.dim() not in (1, 2):
                    raise ValueError(
                        f"LSTMCell: Expected hx[{idx}] to be 1D or 2D, got {value.dim()}D instead"
                    )
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            z = zeros(input.size(0), self.hidden_size, dtype=input.dtype)
            hx = (z, z)
        elif not is_batched:
            hx = (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        h, c = recurrent.cell(
            "LSTM", input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh
        )
        if not is_batched:
            return h.squeeze(0), c.squeeze(0)
        return h, c
