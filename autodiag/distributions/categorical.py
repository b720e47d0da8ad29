"""``torch.distributions.Categorical``."""

from __future__ import annotations

import numpy as np

from autodiag.distributions import constraints
from autodiag.distributions.distribution import Distribution
from autodiag.distributions.utils import (
    lazy_property,
    logits_to_probs,
    probs_to_logits,
)
from autodiag.size import Size

_NO_SHAPE = Size()  # the default sample/batch/event shape (a Size is immutable)

__all__ = ["Categorical"]


def draw_categories(probs: np.ndarray, n: int, stream) -> np.ndarray:
    """``n`` draws (with replacement) from each row of ``probs`` (rows × K, unnormalised):
    an array rows × n of category indices, as ``torch.multinomial(probs, n, True)``.

    NOTE: each row's cumulative sum is divided by its last entry, so the last boundary is
    exactly 1 and a uniform draw in [0, 1) never falls past it; a category of probability 0
    has an empty interval and is never drawn."""
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    cdf = np.cumsum(probs.astype(np.float64), axis=-1)
    total = cdf[:, -1:]
    if (total <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    cdf = cdf / total
    u = stream.random((probs.shape[0], n))
    return (u[:, :, None] >= cdf[:, None, :]).sum(-1).astype(np.int64)


class Categorical(Distribution):
    """A distribution over ``{0, ..., K-1}`` given by ``probs`` (normalised to sum to 1 along
    the last dimension) or ``logits`` (normalised to log-probabilities).

    >>> import autodiag as torch
    >>> from autodiag.distributions import Categorical
    >>> d = Categorical(probs=torch.tensor([1.0, 3.0]))
    >>> d.probs
    tensor([0.2500, 0.7500])
    >>> d.log_prob(torch.tensor(1))
    tensor(-0.2877)
    >>> d.sample((4,)).shape
    torch.Size([4])
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.dim() > 1 else Size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = Size(batch_shape)
        param_shape = tuple(batch_shape) + (self._num_events,)
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(param_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(param_shape)
            new._param = new.logits
        new._num_events = self._num_events
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    @property
    def mean(self):
        from autodiag.ops.factories import full

        return full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return self.mean

    def sample(self, sample_shape=_NO_SHAPE):
        from autodiag.ops.sampling import multinomial

        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        probs_2d = self.probs.detach().reshape(-1, self._num_events)
        n = int(np.prod(tuple(sample_shape), dtype=np.int64))
        # PyTorch's draw: torch.multinomial(probs_2d, n, True).T
        draws = multinomial(probs_2d, n, True).T
        return draws.reshape(tuple(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        shape = tuple(np.broadcast_shapes(tuple(value.shape), tuple(self.logits.shape)))
        log_pmf = self.logits if tuple(self.logits.shape) == shape else self.logits.expand(shape)
        value = value.expand(shape)[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = float(np.finfo(self.logits.dtype.np).min)
        logits = self.logits.clamp(min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand: bool = True):
        from autodiag.dtypes import int64
        from autodiag.ops.factories import arange

        values = arange(self._num_events, dtype=int64)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values
