"""Random sampling ops: ``multinomial`` and ``bernoulli``.

They draw from autodiag's generator (the global stream ``torch.manual_seed`` seeds, or a
``torch.Generator`` passed as ``generator=``): seeded, they repeat on autodiag, but the draws
are not PyTorch's (NOTE in generator.py: a different bit generator and different sampling
algorithms), so a seeded ``multinomial`` gives *a* sample with the right distribution, not
PyTorch's sample.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node
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
    rng = _stream(generator)
    if replacement:
        # inverse CDF, every row at once: row r's CDF lives in [r, r + 1]
        cdf = np.cumsum(w / total[:, None], axis=1)
        cdf[:, -1] = 1.0  # NOTE: rounding must not leave a gap above the last category
        offs = np.arange(rows.shape[0], dtype=np.float64)[:, None]
        u = rng.random((rows.shape[0], n))
        idx = np.searchsorted((cdf + offs).ravel(), (u + offs).ravel(), side="right")
        idx = idx.reshape(rows.shape[0], n) - (np.arange(rows.shape[0]) * ncat)[:, None]
        # a zero-weight category is never drawn, also at a CDF plateau's edge
        idx = np.minimum(idx, ncat - 1)
    else:
        # exponential race: the n smallest Exp(1) / w are a weighted sample without
        # replacement (zero weights race at inf: drawn only once the others are exhausted)
        with np.errstate(divide="ignore"):
            keys = rng.exponential(size=rows.shape) / w
        idx = np.argsort(keys, axis=1, kind="stable")[:, :n]
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


def _draw(probs: np.ndarray, shape: tuple, dtype, generator) -> np.ndarray:
    if probs.size and (np.isnan(probs).any() or (probs < 0).any() or (probs > 1).any()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    return (_stream(generator).random(shape) < probs).astype(dtype)


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
    probs = d if p is None else np.asarray(float(p))
    out = _draw(probs, d.shape, d.dtype, generator)
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
            out = _draw(np.broadcast_to(p._data, d.shape), d.shape, d.dtype, generator)
            if _state.record and (t.requires_grad or p.requires_grad):
                return result(out, BernoulliBackward1((edge(t), edge(p))))
            return result(out, None)
        out = _draw(np.asarray(float(p)), d.shape, d.dtype, generator)
        if _state.record and t.requires_grad:
            return result(out, BernoulliBackward2((edge(t),)))
        return result(out, None)

    return apply_inplace(self, "bernoulli_", compute, *((p,) if isinstance(p, Tensor) else ()))


Tensor.bernoulli_ = traced("bernoulli_", bernoulli_)
