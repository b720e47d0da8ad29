"""``torch.distributions.Normal``."""

from __future__ import annotations

import math
import numbers

from autodiag.core import grad_mode
from autodiag.distributions import constraints
from autodiag.distributions.distribution import Distribution
from autodiag.distributions.utils import broadcast_all, standard_normal
from autodiag.size import Size

_NO_SHAPE = Size()  # the default sample/batch/event shape (a Size is immutable)

__all__ = ["Normal"]


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``.

    ``rsample`` is reparameterised (``loc + eps * scale``): gradients reach ``loc`` and
    ``scale``.

    >>> import autodiag as torch
    >>> from autodiag.distributions import Normal
    >>> loc = torch.tensor(0.5, requires_grad=True)
    >>> d = Normal(loc, 2.0)
    >>> d.log_prob(torch.tensor(1.0))
    tensor(-1.6433, grad_fn=<SubBackward0>)
    >>> d.rsample((3,)).shape
    torch.Size([3])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        if isinstance(loc, numbers.Number) and isinstance(scale, numbers.Number):
            batch_shape = Size()
        else:
            batch_shape = self.loc.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Normal, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def sample(self, sample_shape=_NO_SHAPE):
        with grad_mode.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=_NO_SHAPE):
        shape = self._extended_shape(sample_shape)
        eps = standard_normal(shape, dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        log_scale = self.scale.log()
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value):
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()
