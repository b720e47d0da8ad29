"""``torch.distributions.kl``: ``kl_divergence(p, q)`` and ``register_kl``.

>>> import autodiag as torch
>>> from autodiag.distributions import Normal, kl_divergence
>>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 2.0))
tensor(0.4431)
"""

from __future__ import annotations

import math

from autodiag.distributions.bernoulli import Bernoulli
from autodiag.distributions.categorical import Categorical
from autodiag.distributions.normal import Normal
from autodiag.distributions.uniform import Uniform

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict = {}


def register_kl(type_p, type_q):
    """Decorator: register ``fn(p, q)`` as the KL divergence of ``type_p`` from ``type_q``."""

    def decorator(fn):
        _KL_REGISTRY[type_p, type_q] = fn
        return fn

    return decorator


def _dispatch(type_p, type_q):
    """The registered rule for the most specific pair of base classes (subclasses inherit)."""
    for p in type_p.__mro__:
        for q in type_q.__mro__:
            fn = _KL_REGISTRY.get((p, q))
            if fn is not None:
                return fn
    return None


def kl_divergence(p, q):
    """``KL(p || q)``, batched over the distributions' batch shape."""
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"No KL(p || q) is implemented for p type {p.__class__.__name__} and q type "
            f"{q.__class__.__name__}"
        )
    return fn(p, q)


_INF = math.inf


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t[(q.probs == 0).expand_as(t)] = _INF
    t[(p.probs == 0).expand_as(t)] = 0
    return t.sum(-1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    from autodiag.nn import functional as F

    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t1[q.probs == 0] = _INF
    t1[p.probs == 0] = 0
    t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    t2[q.probs == 1] = _INF
    t2[p.probs == 1] = 0
    return t1 + t2


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    result[(q.low > p.low) | (q.high < p.high)] = _INF
    return result


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    common_term = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / common_term).log()
    t2 = common_term.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)
