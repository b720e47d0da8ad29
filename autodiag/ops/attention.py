"""The ops a transformer needs beyond the basics: ``baddbmm``, ``lerp``, the ``silu``/``elu``
activations, ``one_hot``, ``pad`` (constant mode), ``normalize``, and
``scaled_dot_product_attention``.

``scaled_dot_product_attention`` records what PyTorch 2.13 records on the CPU (NOTE [Attention
paths]): one fused node when PyTorch's CPU flash kernel would run, else the math path's
decomposition (``mul``, ``matmul``, ``add``, ``_safe_softmax``, ``dropout``, ``matmul``).
"""

from __future__ import annotations

import math

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    broadcasting,
    check_broadcast,
    edge,
    register,
    result,
    save,
    save_output,
    set_broadcast_meta,
    wrap,
)
from autodiag.ops._scalar_convert import _CPP_NAMES
from autodiag.ops.inplace import apply_inplace
from autodiag.ops.pointwise import NotImplementedBackward, _refuse
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# baddbmm
# ---------------------------------------------------------------------------------------------


class BaddbmmBackward0(Node):
    """``beta * self + alpha * (batch1 @ batch2)``."""

    __slots__ = ("alpha", "beta")
    _saved_names = ("batch1", "batch2")

    def backward(self, xp, g):
        needs_self, needs_b1, needs_b2 = self.needs_grad
        b1, b2 = self.saved_batch1(xp), self.saved_batch2(xp)
        gs = g1 = g2 = None
        if needs_self:
            gs = g if self.beta == 1 else g * self.beta  # summed to self's shape by the engine
        if needs_b1:
            g1 = xp.matmul(g, xp.mT(b2))
            g1 = g1 if self.alpha == 1 else g1 * self.alpha
        if needs_b2:
            g2 = xp.matmul(xp.mT(b1), g)
            g2 = g2 if self.alpha == 1 else g2 * self.alpha
        return (gs, g1, g2)

    def _saved_extra(self):
        return {"alpha": self.alpha, "beta": self.beta}


@register()
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` over a batch of matrices.

    >>> import autodiag as torch
    >>> torch.baddbmm(torch.zeros(1, 2), torch.ones(3, 2, 4), torch.ones(3, 4, 2)).shape
    torch.Size([3, 2, 2])
    """
    x, b1, b2 = (as_tensor_operand(t) for t in (input, batch1, batch2))
    a1, a2 = b1._data, b2._data
    if a1.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if a2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if a2.shape[:2] != (a1.shape[0], a1.shape[2]):
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{a1.shape[0]}, {a1.shape[2]}] but got: [{a2.shape[0]}, {a2.shape[1]}]."
        )
    if not (a1.dtype == a2.dtype == x._data.dtype):
        other = b1 if a1.dtype != x._data.dtype else b2
        raise RuntimeError(
            f"expected scalar type {x.dtype.scalar_name} but found {other.dtype.scalar_name}"
        )
    shape = (a1.shape[0], a1.shape[1], a2.shape[2])
    try:
        base = np.broadcast_to(x._data, shape)
    except ValueError:
        raise RuntimeError(
            f"The expanded size of the tensor ({shape[-1]}) must match the existing size "
            f"({x._data.shape[-1] if x._data.ndim else 1}) at non-singleton dimension "
            f"{len(shape) - 1}.  Target sizes: [{', '.join(map(str, shape))}].  Tensor sizes: "
            f"[{', '.join(map(str, x._data.shape))}]"
        ) from None
    prod = np.matmul(a1, a2)
    if alpha != 1:
        prod = prod * alpha
    # NOTE: beta == 0 ignores input (nan and inf in it do not propagate), as in PyTorch
    out = prod if beta == 0 else base * beta + prod if beta != 1 else base + prod
    out = np.asarray(out, dtype=a1.dtype)
    if _state.record and (x.requires_grad or b1.requires_grad or b2.requires_grad):
        node = BaddbmmBackward0((edge(x), edge(b1), edge(b2)))
        node.alpha, node.beta = alpha, beta
        node._saved = (save(b1), save(b2))
        set_broadcast_meta(node, out, x, b1, b2)
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# lerp
# ---------------------------------------------------------------------------------------------


class LerpBackward0(Node):
    """``lerp(self, end, weight)`` with a Python number ``weight``."""

    __slots__ = ("weight",)

    def backward(self, xp, g):
        needs_self, needs_end = self.needs_grad
        w = self.weight
        return (g * (1 - w) if needs_self else None, g * w if needs_end else None)

    def _saved_extra(self):
        return {"weight": self.weight}


class LerpBackward1(Node):
    """``lerp(self, end, weight)`` with a tensor ``weight``."""

    __slots__ = ()
    _saved_names = ("self", "end", "weight")

    def backward(self, xp, g):
        needs_self, needs_end, needs_weight = self.needs_grad
        w = self.saved_weight(xp)
        gw = None
        if needs_weight:
            gw = g * (self.saved_end(xp) - self.saved_self(xp))
        return (g * (1 - w) if needs_self else None, g * w if needs_end else None, gw)


def _lerp_array(a, b, w):
    # PyTorch's kernel: two formulas, so that weight 0 gives self and weight 1 gives end exactly
    diff = b - a
    return np.where(np.abs(w) < 0.5, a + w * diff, b - diff * (1 - w))


def _cpp_name(t: Tensor) -> str:
    """The C++ type name PyTorch's lerp messages use ("float", "double")."""
    return _CPP_NAMES.get(t._data.dtype, t.dtype.scalar_name)


@register(inplace=True)
def lerp(input, end, weight):
    """``input + weight * (end - input)``.

    >>> import autodiag as torch
    >>> torch.lerp(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 5.0]), 0.25)
    tensor([1.5000, 2.7500])
    """
    return _lerp(input, end, weight, in_place=False)


def _lerp(input, end, weight, in_place: bool):
    x, e = as_tensor_operand(input), as_tensor_operand(end)
    if x._data.dtype != e._data.dtype:
        raise RuntimeError(f"expected dtype {_cpp_name(x)} for `end` but got dtype {_cpp_name(e)}")
    if x._data.dtype.kind != "f":
        raise NotImplementedError(
            f"\"lerp_kernel_scalar\" not implemented for '{x.dtype.scalar_name}'"
        )
    if isinstance(weight, Tensor):
        w = weight
        wd = w._data
        out_dt = x._data.dtype
        if wd.dtype != x._data.dtype:
            if wd.ndim:
                raise RuntimeError(
                    f"expected dtype {_cpp_name(x)} for `weight` but got dtype {_cpp_name(w)}"
                )
            if x._data.ndim == 0 and e._data.ndim == 0 and not in_place:
                out_dt = np.promote_types(x._data.dtype, wd.dtype)  # all 0-d: promoted
            wd = wd.astype(out_dt)  # PyTorch checks a 0-d weight's dtype not: cast
        xd, ed = x._data.astype(out_dt, copy=False), e._data.astype(out_dt, copy=False)
        out = broadcasting(_lerp_array, xd, ed, wd).astype(out_dt)
        if _state.record and (x.requires_grad or e.requires_grad or w.requires_grad):
            node = LerpBackward1((edge(x), edge(e), edge(w)))
            # as PyTorch's generated code: self and end only for weight's formula (an in-place
            # write into an unsaved one is then no error at backward); weight always
            ends = w.requires_grad
            node._saved = (save(x) if ends else None, save(e) if ends else None, save(w))
            set_broadcast_meta(node, out, x, e, w)
            return result(out, node)
        return result(out, None)
    wv = float(weight)
    out = np.asarray(
        broadcasting(_lerp_array, x._data, e._data, x._data.dtype.type(wv)), dtype=x._data.dtype
    )
    if _state.record and (x.requires_grad or e.requires_grad):
        node = LerpBackward0((edge(x), edge(e)))
        node.weight = wv
        set_broadcast_meta(node, out, x, e)
        return result(out, node)
    return result(out, None)


# lerp_ writes into self: its dtype stays (an all-0-d out-of-place lerp promotes)
lerp.inplace_compute = lambda input, end, weight: _lerp(input, end, weight, in_place=True)


# ---------------------------------------------------------------------------------------------
# silu, elu
# ---------------------------------------------------------------------------------------------


def _sigmoid_array(a):
    return 1 / (1 + np.exp(-a))


class SiluBackward0(Node):
    __slots__ = ()
    _saved_names = ("self",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        s = _sigmoid_array(x) if xp.arrays else x.sigmoid()
        return (g * (s * (1 + x * (1 - s))),)


def _silu(input) -> Tensor:
    _refuse(input, "silu", "biu")
    d = input._data
    with np.errstate(over="ignore"):
        out = np.asarray(d * _sigmoid_array(d), dtype=d.dtype)
    if _state.record and input.requires_grad:
        node = SiluBackward0((edge(input),))
        node._saved = (save(input),)
        return result(out, node)
    return result(out, None)


@register(method=False, home="nn.functional")
def silu(input, inplace: bool = False):
    """``x * sigmoid(x)`` (the swish activation).

    >>> import autodiag as torch
    >>> torch.nn.functional.silu(torch.tensor([0.0, 1.0]))
    tensor([0.0000, 0.7311])
    """
    if inplace:
        return apply_inplace(input, "silu_", _silu)
    return _silu(input)


# NOTE [elu backward]
# As PyTorch: the gradient is ``elu_backward(grad, alpha, scale, input_scale, is_result,
# self_or_result)``, which selects (``self_or_result <= 0`` picks the exponential branch, so a
# NaN input takes the linear one), and under create_graph it is recorded as one
# ``EluBackwardBackward0`` node (edges grad_output, self_or_result) whose backward is
# ``elu_backward`` again for grad_output and ``elu_double_backward`` for self_or_result: the
# exponential branch's derivative multiplied (not selected) by ``self_or_result < 0``.


def _elu_backward_array(node, a, b):
    """``elu_backward`` on arrays: ``a`` the incoming gradient, ``b`` self or result."""
    ng, pc, nic = node.alpha * node.scale, node.scale, node.input_scale
    with np.errstate(over="ignore", invalid="ignore"):
        if node.is_result:
            neg = a * nic * (b + ng)
        else:
            neg = a * nic * ng * np.exp(b * nic)
        return np.asarray(np.where(b <= 0, neg, a * pc), dtype=np.result_type(a, b))


def _elu_backward(xp, node, a, b):
    """``elu_backward`` in the vocabulary ``xp``: an array, or a Tensor recorded as
    ``EluBackwardBackward0`` (NOTE [elu backward])."""
    if xp.arrays:
        return _elu_backward_array(node, a, b)
    out = _elu_backward_array(node, a._data, b._data)
    if _state.record and (a.requires_grad or b.requires_grad):
        bb = EluBackwardBackward0((edge(a), edge(b)))
        bb.alpha, bb.scale, bb.input_scale = node.alpha, node.scale, node.input_scale
        bb.is_result = node.is_result
        bb._saved = (save(a), save(b))
        return result(out, bb)
    return result(out, None)


class EluBackward0(Node):
    __slots__ = ("alpha", "scale", "input_scale")
    _saved_names = ("self",)
    is_result = False

    def backward(self, xp, g):
        return (_elu_backward(xp, self, g, self.saved_self(xp)),)

    def _saved_extra(self):
        return {"alpha": self.alpha, "scale": self.scale, "input_scale": self.input_scale}


class EluBackward1(EluBackward0):
    """In-place elu: the formula reads the output (the input is overwritten)."""

    __slots__ = ()
    _saved_names = ("result",)
    is_result = True

    def backward(self, xp, g):
        return (_elu_backward(xp, self, g, self.saved_result(xp)),)


class EluBackwardBackward0(Node):
    """The derivative of ``elu_backward`` (NOTE [elu backward])."""

    __slots__ = ("alpha", "scale", "input_scale", "is_result")
    _saved_names = ("grad_output", "self_or_result")

    def backward(self, xp, gg):
        needs_go, needs_b = self.needs_grad
        go, b = self.saved_grad_output(xp), self.saved_self_or_result(xp)
        d_go = _elu_backward(xp, self, gg, b) if needs_go else None
        d_b = None
        if needs_b:
            lt = b < 0
            mask = lt.astype(_dtype_of(gg)) if xp.arrays else lt.to(gg.dtype)
            scaled = gg * go * self.input_scale
            if self.is_result:
                d_b = scaled * mask
            else:
                d_b = _elu_backward(xp, self, scaled, b) * mask
        return (d_go, d_b)

    def _saved_extra(self):
        return {
            "alpha": self.alpha,
            "scale": self.scale,
            "input_scale": self.input_scale,
            "is_result": self.is_result,
        }


def _dtype_of(a):
    return a.dtype if isinstance(a, np.ndarray) else np.asarray(a).dtype


def _elu(input, alpha: float, cls) -> Tensor:
    _refuse(input, "elu", "biu")
    d = input._data
    with np.errstate(over="ignore", invalid="ignore"):
        # float32 expm1 through float64, rounded once: PyTorch's (SLEEF's expm1f, 1 ulp) is
        # that value for all but ~0.1% of inputs, numpy's float32 loop for ~89% (measured on
        # 100,000 normal draws * 4: 107 and 11,459 differ)
        e = np.expm1(d.astype(np.float64)).astype(d.dtype) if d.dtype == np.float32 else np.expm1(d)
        out = np.asarray(np.where(d > 0, d, alpha * e), dtype=d.dtype)
    if _state.record and input.requires_grad:
        node = cls((edge(input),))
        node.alpha, node.scale, node.input_scale = alpha, 1, 1
        r = result(out, node)
        node._saved = (save_output(r),) if cls is EluBackward1 else (save(input),)
        return r
    return result(out, None)


@register(method=False, home="nn.functional")
def elu(input, alpha: float = 1.0, inplace: bool = False):
    """``x`` where positive, else ``alpha * (exp(x) - 1)``.

    >>> import autodiag as torch
    >>> torch.nn.functional.elu(torch.tensor([-1.0, 2.0]))
    tensor([-0.6321,  2.0000])
    """
    if inplace:
        if alpha < 0:
            raise RuntimeError(
                "In-place elu backward calculation is triggered with a negative slope which is "
                "not supported. This is caused by calling in-place forward function with a "
                "negative slope, please call out-of-place version instead."
            )
        return apply_inplace(input, "elu_", lambda t: _elu(t, alpha, EluBackward1))
    return _elu(input, alpha, EluBackward0)


# ---------------------------------------------------------------------------------------------
# one_hot
# ---------------------------------------------------------------------------------------------


@register(method=False, home="nn.functional")
def one_hot(tensor, num_classes: int = -1):
    """Class indices to one-hot rows (int64), one more dim of size ``num_classes``.

    >>> import autodiag as torch
    >>> torch.nn.functional.one_hot(torch.tensor([0, 2]), 3)
    tensor([[1, 0, 0],
            [0, 0, 1]])
    """
    d = as_tensor_operand(tensor)._data
    if d.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if d.size == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        return wrap(np.zeros(d.shape + (num_classes,), dtype=np.int64))
    if d.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(d.max()) + 1
    elif d.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return wrap((d[..., None] == np.arange(num_classes)).astype(np.int64))


# ---------------------------------------------------------------------------------------------
# pad (constant mode)
# ---------------------------------------------------------------------------------------------


class ConstantPadNdBackward0(Node):
    """The gradient of a constant pad is the pad undone: the same op with negated widths."""

    __slots__ = ("pad",)

    def backward(self, xp, g):
        back = tuple(-p for p in self.pad)
        if xp.arrays:
            return (_pad_array(g, back, 0),)
        return (pad(g, back),)

    def _saved_extra(self):
        return {"pad": self.pad}


def _pad_array(d: np.ndarray, widths: tuple, value) -> np.ndarray:
    """``widths`` as F.pad reads them: (left, right) of the last dim first; negative crops."""
    n = len(widths) // 2
    shape = list(d.shape)
    src, dst = [slice(None)] * d.ndim, [slice(None)] * d.ndim
    for i in range(n):
        ax = d.ndim - 1 - i
        lo, hi = widths[2 * i], widths[2 * i + 1]
        size = d.shape[ax]
        new = size + lo + hi
        if new < 0:
            raise RuntimeError(
                f"The input size {size}, plus negative padding {lo} and {hi} resulted in a "
                f"negative output size, which is invalid. Check dimension {ax} of your input."
            )
        shape[ax] = new
        # the part of the input that survives, and where it lands
        s0, s1 = max(0, -lo), size - max(0, -hi)
        dst[ax] = slice(max(0, lo), max(0, lo) + max(0, s1 - s0))
        src[ax] = slice(s0, max(s0, s1))
    out = np.full(shape, value, dtype=d.dtype)
    out[tuple(dst)] = d[tuple(src)]
    return out


def _check_crops(shape: tuple, widths: tuple) -> None:
    """PyTorch's constant_pad_nd crops first, with narrow (outer padded dim first, its left
    crop then its right one), before it checks the padded sizes: a crop longer than what is
    left is narrow's error (F.pad(zeros(0, 0), (2, -1)), F.pad(ones(2, 1), (-1, -1)))."""
    n = len(widths) // 2
    for ax in range(len(shape) - n, len(shape)):
        k = 2 * (len(shape) - 1 - ax)
        size = shape[ax]
        for crop in widths[k : k + 2]:
            if crop < 0:
                size += crop
                if size < 0:
                    raise RuntimeError("narrow(): length must be non-negative.")


@register(method=False, home="nn.functional")
def pad(input, pad, mode: str = "constant", value=None):  # noqa: A002 - PyTorch's names
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left, right, top, bottom, ...)``;
    negative widths crop. Only ``mode='constant'``.

    >>> import autodiag as torch
    >>> torch.nn.functional.pad(torch.ones(1, 2), (1, 0), value=5.0)
    tensor([[5., 1., 1.]])
    """
    widths = tuple(int(p) for p in pad)
    if mode != "constant":
        if mode in ("reflect", "replicate", "circular"):
            raise NotImplementedError(
                f"autodiag: F.pad(mode={mode!r}) is not supported; only mode='constant'"
            )
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(widths) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    d = input._data
    if len(widths) // 2 > d.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(widths)} and input of dimension {d.ndim}"
        )
    _check_crops(d.shape, widths)
    out = _pad_array(d, widths, 0 if value is None else value)
    if _state.record and input.requires_grad:
        node = ConstantPadNdBackward0((edge(input),))
        node.pad = widths
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# normalize
# ---------------------------------------------------------------------------------------------


@register(method=False, home="nn.functional")
def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``input / max(norm(input, p, dim), eps)``, recorded as PyTorch's composite.

    >>> import autodiag as torch
    >>> torch.nn.functional.normalize(torch.tensor([[3.0, 4.0]]))
    tensor([[0.6000, 0.8000]])
    """
    if out is not None:
        raise NotImplementedError("autodiag: F.normalize(out=...) is not supported")
    denom = input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    return input / denom


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# ---------------------------------------------------------------------------------------------

# NOTE [Attention paths]
# PyTorch 2.13 on the CPU computes scaled_dot_product_attention with its flash kernel when it
# can (query, key and value 4-d with the same batch, heads and head dim, a last dim of stride 1,
# no dropout, a mask that does not require grad) and records one node,
# ScaledDotProductFlashAttentionForCpuBackward0, with edges to query, key and value. Otherwise
# it runs the math path, which records its pieces: query and key.T each times sqrt(scale)
# (MulBackward1), matmul, the mask added (AddBackward0), _safe_softmax (rows that are entirely
# masked give 0, not NaN), dropout, matmul with value. We choose the same path and record the
# same nodes. The flash node's backward has no derivative in PyTorch (double backward raises
# "derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward is not
# implemented"); ours raises the same.


class SafeSoftmaxBackward0(Node):
    """``_safe_softmax``: softmax whose fully masked rows (all -inf) are 0."""

    __slots__ = ("dim",)
    _saved_names = ("result",)

    def backward(self, xp, g):
        r = self.saved_result(xp)
        gr = g * r
        s = gr.sum(axis=self.dim, keepdims=True) if xp.arrays else gr.sum(self.dim, keepdim=True)
        return (r * (g - s),)

    def _saved_extra(self):
        return {"dim": self.dim}


def _safe_softmax_array(d: np.ndarray, dim: int) -> np.ndarray:
    # NOTE: initial=-inf: an empty row (no keys) is a dead row, whose weights are all zero
    m = d.max(axis=dim, keepdims=True, initial=-np.inf)
    dead = np.isneginf(m)
    with np.errstate(invalid="ignore"):
        e = d - np.where(dead, 0, m)
        if e.dtype != d.dtype:
            e = np.exp(e)
            out = e / e.sum(axis=dim, keepdims=True)
        else:  # the same operations in one buffer (a fresh allocation per step is a page fault)
            out = np.exp(e, out=e)
            out /= out.sum(axis=dim, keepdims=True)
    if not dead.any():
        return out.astype(d.dtype, copy=False)
    return np.where(dead, np.zeros((), dtype=d.dtype), out).astype(d.dtype, copy=False)


def safe_softmax(x: Tensor, dim: int) -> Tensor:
    """PyTorch's ``_safe_softmax`` (the attention math path's softmax)."""
    d = x._data
    dim = dim % d.ndim
    out = _safe_softmax_array(d, dim)
    if _state.record and x.requires_grad:
        node = SafeSoftmaxBackward0((edge(x),))
        node.dim = dim
        r = result(out, node)
        node._saved = (save_output(r),)
        return r
    return result(out, None)


class ScaledDotProductFlashAttentionForCpuBackward0(Node):
    # ``probs``: the forward's attention weights, read once by the first backward (after the
    # saved inputs' version checks), as PyTorch's kernel keeps its logsumexp for its backward
    __slots__ = ("scale", "is_causal", "mask", "probs")
    _saved_names = ("query", "key", "value", "output")

    def backward(self, xp, g):
        q, k, v = (self.saved_query(xp), self.saved_key(xp), self.saved_value(xp))
        p, self.probs = self.probs, None
        if xp.arrays:
            return _flash_backward(g, q, k, v, self.scale, self.mask, p)
        grads = _flash_backward(g._data, q._data, k._data, v._data, self.scale, self.mask, p)
        # create_graph: PyTorch's gradients come from a kernel with no derivative
        deps = tuple(t for t in (g, q, k, v) if t.requires_grad)
        if not deps or not _state.record:
            return tuple(wrap(a) for a in grads)
        outs = []
        for a in grads:
            node = NotImplementedBackward(tuple(edge(t) for t in deps))
            node.op = "_scaled_dot_product_flash_attention_for_cpu_backward"
            outs.append(result(a, node))
        return tuple(outs)

    def _saved_extra(self):
        return {"scale": self.scale, "is_causal": self.is_causal}


def _attn_bias(mask, is_causal: bool, lq: int, lk: int, dtype) -> np.ndarray | None:
    """The additive mask: 0 where attending, -inf where not (bool masks, causal)."""
    bias = None
    if mask is not None:
        m = mask._data
        bias = np.where(m, 0, -np.inf).astype(dtype) if m.dtype == np.bool_ else m
    if is_causal:
        causal = np.where(np.tril(np.ones((lq, lk), dtype=bool)), 0, -np.inf).astype(dtype)
        bias = causal if bias is None else bias + causal
    return bias


def _attn_probs(q, k, scale, bias):
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    s *= scale
    if bias is not None:
        if np.broadcast_shapes(s.shape, bias.shape) == s.shape and bias.dtype == s.dtype:
            s += bias
        else:
            s = s + bias
    return _safe_softmax_array(s, s.ndim - 1)


def _flash_backward(g, q, k, v, scale, bias, p=None):
    if p is None:
        p = _attn_probs(q, k, scale, bias)
    gv = np.matmul(np.swapaxes(p, -1, -2), g)
    gp = np.matmul(g, np.swapaxes(v, -1, -2))
    if gp.dtype == p.dtype == q.dtype == k.dtype:
        # the formula's operations, in place in the fresh products (each fresh allocation of
        # this size is page faults: they cost more than the arithmetic)
        gp -= (gp * p).sum(axis=-1, keepdims=True)
        gp *= p
        gq = np.matmul(gp, k)
        gq *= scale
        gk = np.matmul(np.swapaxes(gp, -1, -2), q)
        gk *= scale
    else:
        gs = p * (gp - (gp * p).sum(axis=-1, keepdims=True))
        gq = np.matmul(gs, k) * scale
        gk = np.matmul(np.swapaxes(gs, -1, -2), q) * scale
    dt = q.dtype
    return (gq.astype(dt, copy=False), gk.astype(dt, copy=False), gv.astype(dt, copy=False))


def _flash_applies(q, k, v, mask, dropout_p) -> bool:
    """Whether PyTorch 2.13's CPU dispatcher picks the flash kernel (NOTE [Attention paths])."""
    if dropout_p > 0 or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return False
    if not (q.shape[:2] == k.shape[:2] == v.shape[:2]):
        return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]) or k.shape[-2] != v.shape[-2]:
        return False
    if 0 in q.shape or 0 in k.shape:
        return False
    for t in (q, k, v):
        d = t._data
        if d.shape[-1] > 1 and d.strides[-1] != d.itemsize:
            return False
    if mask is not None and mask.requires_grad:
        return False
    return q._data.dtype.kind == "f"


@register(method=False, home="nn.functional")
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale=None,
    enable_gqa: bool = False,
):
    """``softmax(query @ key.T * scale + mask) @ value``, PyTorch's nodes on the CPU.

    ``attn_mask``: bool (True attends) or float (added); ``is_causal`` masks the future;
    ``dropout_p`` drops attention weights with PyTorch's draws (``dropout``, ops/rng.py).

    >>> import autodiag as torch
    >>> q = torch.ones(1, 1, 2, 4)
    >>> torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).shape
    torch.Size([1, 1, 2, 4])
    """
    q, k, v = query, key, value
    if not (q._data.dtype == k._data.dtype == v._data.dtype):
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{q.dtype.scalar_name} key.dtype: {k.dtype.scalar_name} and value.dtype: "
            f"{v.dtype.scalar_name} instead."
        )
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError(
            "scaled_dot_product_attention: query, key and value must have at least 2 "
            f"dimensions, got {q.ndim}, {k.ndim} and {v.ndim}"
        )
    if attn_mask is not None:
        mdt = attn_mask._data.dtype
        if mdt != np.bool_ and mdt != q._data.dtype:
            raise RuntimeError(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                f"attn_mask.dtype: {attn_mask.dtype.scalar_name} and  query.dtype: "
                f"{q.dtype.scalar_name} instead."
            )
    if enable_gqa and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        raise NotImplementedError(
            "autodiag: scaled_dot_product_attention(enable_gqa=True) with fewer key/value "
            "heads than query heads is not supported"
        )
    if q.shape[-1] != k.shape[-1]:
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{int(np.prod(k.shape[:-2]))}, {q.shape[-1]}] but got: "
            f"[{int(np.prod(k.shape[:-2]))}, {k.shape[-1]}]."
        )
    e = q.shape[-1]
    sc = 1 / math.sqrt(e) if scale is None else float(scale)
    lq, lk = q.shape[-2], k.shape[-2]
    if _flash_applies(q, k, v, attn_mask, dropout_p):
        return _flash(q, k, v, attn_mask, is_causal, sc, lq, lk)
    return _math(q, k, v, attn_mask, dropout_p, is_causal, sc, lq, lk)


def _flash(q, k, v, attn_mask, is_causal, sc, lq, lk) -> Tensor:
    dt = q._data.dtype
    bias = _attn_bias(attn_mask, is_causal, lq, lk, dt)
    if bias is not None:  # a mask that does not fit: PyTorch's broadcast error
        check_broadcast(q.shape[:-1] + (lk,), bias.shape)
    p = _attn_probs(q._data, k._data, sc, bias)
    out = _layout_of(np.asarray(np.matmul(p, v._data), dtype=dt), q._data)
    if _state.record and (q.requires_grad or k.requires_grad or v.requires_grad):
        node = ScaledDotProductFlashAttentionForCpuBackward0((edge(q), edge(k), edge(v)))
        node.scale, node.is_causal, node.mask, node.probs = sc, is_causal, bias, p
        r = result(out, node)
        node._saved = (save(q), save(k), save(v), save_output(r))
        return r
    return result(out, None)


def _layout_of(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``a`` laid out in memory as ``ref`` is (PyTorch's flash kernel allocates its output like
    the query): what a later ``reshape`` can view without a copy depends on it."""
    if ref.flags.c_contiguous:
        return a
    perm = np.argsort(-np.asarray(ref.strides), kind="stable")
    return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))


def _math(q, k, v, attn_mask, dropout_p, is_causal, sc, lq, lk) -> Tensor:
    from autodiag.ops.nn_ops import dropout, mul_scalar

    if attn_mask is not None and is_causal:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
            "is_causal=True"
        )
    if is_causal:
        attn_mask = wrap(np.tril(np.ones((lq, lk), dtype=bool)))
    if attn_mask is not None and attn_mask._data.dtype == np.bool_:
        # PyTorch's convert_boolean_attn_mask: 0 where attending, -inf elsewhere
        attn_mask = wrap(np.where(attn_mask._data, 0, -np.inf).astype(q._data.dtype))
    f = math.sqrt(abs(sc))
    attn = mul_scalar(q, -f if sc < 0 else f) @ mul_scalar(k.transpose(-2, -1), f)
    if attn_mask is not None:
        shape = np.broadcast_shapes(attn.shape, attn_mask.shape)
        if shape != tuple(attn.shape):  # PyTorch adds in place: the mask must fit attn
            raise RuntimeError(
                f"output with shape [{', '.join(map(str, attn.shape))}] doesn't match the "
                f"broadcast shape [{', '.join(map(str, shape))}]"
            )
        attn = attn + attn_mask
    attn = safe_softmax(attn, -1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p, True)
    return attn @ v
