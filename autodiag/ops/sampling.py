"""Random sampling ops: ``multinomial`` and ``bernoulli``.

They draw from PyTorch's stream (the global one ``torch.manual_seed`` seeds, or a
``torch.Generator`` passed as ``generator=``) with ATen's CPU algorithms (ops/rng.py), so a
seeded ``multinomial`` or ``bernoulli`` gives PyTorch's sample.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops import rng
from autodiag.ops._core import _state, as_tensor_operand, edge, register, result, wrap
from autodiag.ops.factories import _stream
from autodiag.ops.inplace import apply_inplace
from autodiag.ops.pointwise import NotImplementedBackward
from autodiag.tensor import Tensor
from autodiag.trace.events import traced

# ---------------------------------------------------------------------------------------------
# multinomial
# ---------------------------------------------------------------------------------------------


@register()
def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):
    """Indices drawn from the categorical distribution(s) of ``input``'s rows (weights need
    not sum to 1). Without replacement an index is drawn at most once per row.

    >>> import autodiag as torch
    >>> torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), 2, replacement=True)
    tensor([1, 1])
    """
    x = as_tensor_operand(input)
    p = x._data
    if p.dtype.kind != "f":
        raise RuntimeError(
            f"multinomial only supports floating-point dtypes for input, got: "
            f"{x.dtype.legacy_type_name.split('.')[-1].replace('Tensor', '')}"
        )
    if p.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = int(num_samples)
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    rows = p.reshape(1, -1) if p.ndim == 1 else p
    ncat = rows.shape[1]
    if not replacement and n > ncat:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    w = rows.astype(np.float64)
    total = w.sum(axis=1)
    if (total <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    stream = _stream(generator)
    if replacement and n > 1:
        idx = rng.multinomial_with_replacement(stream, rows, n)
    else:
        # ATen's fast path (no replacement, or one sample): the n largest p / q, q ~ Exp(1)
        # drawn for every entry (exponential_ on a tensor shaped like the input)
        q = rng.empty_like(p)
        rng.fill(q, rng.exponential(stream, q.size, 1.0).astype(p.dtype))
        keys = (p / q).reshape(rows.shape)
        if n == 1:
            idx = np.argmax(keys, axis=1)[:, None]
        else:
            idx = np.argsort(-keys, axis=1, kind="stable")[:, :n]
    idx = idx.astype(np.int64)
    return wrap(idx.reshape(n) if p.ndim == 1 else idx)


# ---------------------------------------------------------------------------------------------
# bernoulli
# ---------------------------------------------------------------------------------------------


class BernoulliBackward0(Node):
    """A sample does not depend smoothly on its probabilities: the gradient is zero."""

    __slots__ = ()

    def backward(self, xp, g):
        return (xp.zeros_like(g),)


class BernoulliBackward1(Node):
    """``bernoulli_(p)`` with a tensor ``p``: zero gradients to self and p."""

    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_p = self.needs_grad
        return (xp.zeros_like(g) if needs_self else None, None)


class BernoulliBackward2(BernoulliBackward0):
    """``bernoulli_(p)`` with a Python number ``p``."""

    __slots__ = ()


def _check_probs(probs: np.ndarray) -> None:
    if probs.size and (np.isnan(probs).any() or (probs < 0).any() or (probs > 1).any()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")


def _draw(like: np.ndarray, p, generator) -> np.ndarray:
    """0/1 draws shaped and typed like ``like``, in its memory order (NOTE [Draw order] in
    rng.py): ``p`` a number (a float64 uniform each) or an array broadcast to ``like``."""
    stream = _stream(generator)
    out = rng.empty_like(like)
    if isinstance(p, np.ndarray):
        _check_probs(p)
        probs = np.broadcast_to(p, like.shape)
        hits = rng.bernoulli_tensor(stream, rng.in_memory_order(out, probs))
    else:
        _check_probs(np.asarray(p))
        hits = rng.bernoulli_scalar(stream, like.size, p)
    rng.fill(out, hits.astype(like.dtype))
    return out


@register()
def bernoulli(input, p=None, *, generator=None):
    """1 with probability ``input`` (or ``p``), else 0, elementwise; ``input``'s dtype.

    >>> import autodiag as torch
    >>> torch.bernoulli(torch.tensor([0.0, 1.0]))
    tensor([0., 1.])
    """
    x = as_tensor_operand(input)
    d = x._data
    if d.dtype.kind != "f":
        raise NotImplementedError(
            f"\"bernoulli_tensor_cpu_p_\" not implemented for '{x.dtype.scalar_name}'"
        )
    out = _draw(d, d if p is None else float(p), generator)
    if _state.record and x.requires_grad:
        if p is None:
            return result(out, BernoulliBackward0((edge(x),)))
        node = NotImplementedBackward((edge(x),))
        node.op = "bernoulli.p"
        return result(out, node)
    return result(out, None)


def bernoulli_(self, p=0.5, *, generator=None):
    """Fill ``self`` with 0/1 draws of probability ``p`` (a number or a tensor)."""

    def compute(t):
        d = t._data
        if isinstance(p, Tensor):
            out = _draw(d, p._data, generator)
            if _state.record and (t.requires_grad or p.requires_grad):
                return result(out, BernoulliBackward1((edge(t), edge(p))))
            return result(out, None)
        out = _draw(d, float(p), generator)
        if _state.record and t.requires_grad:
            return result(out, BernoulliBackward2((edge(t),)))
        return result(out, None)

    return apply_inplace(self, "bernoulli_", compute, *((p,) if isinstance(p, Tensor) else ()))


Tensor.bernoulli_ = traced("bernoulli_", bernoulli_)
