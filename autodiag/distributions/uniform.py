"""``torch.distributions.Uniform``."""

from __future__ import annotations

import numbers

from autodiag.distributions import constraints
from autodiag.distributions.distribution import Distribution
from autodiag.distributions.utils import broadcast_all
from autodiag.size import Size

_NO_SHAPE = Size()  # the default sample/batch/event shape (a Size is immutable)

__all__ = ["Uniform"]


class Uniform(Distribution):
    """The uniform distribution on ``[low, high)``; ``rsample`` is reparameterised.

    >>> import autodiag as torch
    >>> from autodiag.distributions import Uniform
    >>> Uniform(0.0, 2.0).log_prob(torch.tensor([0.5, 1.5]))
    tensor([-0.6931, -0.6931])
    """

    has_rsample = True

    @property
    def arg_constraints(self) -> dict:
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    def __init__(self, low, high, validate_args=None) -> None:
        self.low, self.high = broadcast_all(low, high)
        if isinstance(low, numbers.Number) and isinstance(high, numbers.Number):
            batch_shape = Size()
        else:
            batch_shape = self.low.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Uniform, _instance)
        batch_shape = Size(batch_shape)
        new.low = self.low.expand(batch_shape)
        new.high = self.high.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return float("nan") * self.high

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=_NO_SHAPE):
        from autodiag.ops.factories import rand

        shape = self._extended_shape(sample_shape)
        u = rand(*shape, dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = self.low.le(value).type_as(self.low)
        ub = self.high.gt(value).type_as(self.low)
        return lb.mul(ub).log() - (self.high - self.low).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        result = (value - self.low) / (self.high - self.low)
        return result.clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()
