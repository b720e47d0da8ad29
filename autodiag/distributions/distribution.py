"""``torch.distributions.Distribution``: the base class (shapes, argument validation, the
``sample``/``rsample`` split).

NOTE [Sampling streams]: samples come from the engine's global random stream, the one
``torch.manual_seed`` seeds: PyTorch's CPU stream (ops/rng.py), drawn through the same ops
PyTorch's distributions use (``normal_``, ``bernoulli``, ``multinomial``, ``rand``), so
``torch.manual_seed(0); Normal(0, 1).sample((3,))`` gives PyTorch's numbers
(tests/test_rng_torch.py).
"""

from __future__ import annotations

from autodiag.core import grad_mode
from autodiag.distributions import constraints
from autodiag.distributions.utils import lazy_property
from autodiag.size import Size
from autodiag.tensor import Tensor

_NO_SHAPE = Size()  # the default sample/batch/event shape (a Size is immutable)

__all__ = ["Distribution"]


def _shown(value) -> str:
    """A tensor as PyTorch's f-string shows it: a 0-d tensor by its value."""
    if isinstance(value, Tensor) and value.dim() == 0:
        return repr(value.item())
    return str(value)


class Distribution:
    """A probability distribution with a ``batch_shape`` (independent, differently
    parametrised copies) and an ``event_shape`` (the shape of one draw).

    ``validate_args`` (default on, as in PyTorch): parameters are checked against
    ``arg_constraints`` on construction and values against ``support`` in ``log_prob``/``cdf``,
    raising ``ValueError`` with PyTorch's message.
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        if value not in (True, False):
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=_NO_SHAPE, event_shape=_NO_SHAPE, validate_args=None) -> None:
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if not self._validate_args:
            return
        for param, constraint in self.arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                continue  # not given: computed from the other parametrisation, never invalid
            value = getattr(self, param)
            if not bool(constraint.check(value).all()):
                raise ValueError(
                    f"Expected parameter {param} "
                    f"({type(value).__name__} of shape {tuple(value.shape)}) "
                    f"of distribution {self!r} "
                    f"to satisfy the constraint {constraint!r}, "
                    f"but found invalid values:\n{_shown(value)}"
                )

    # --- shapes ------------------------------------------------------------------------------

    @property
    def batch_shape(self) -> Size:
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        return self._event_shape

    def _extended_shape(self, sample_shape=_NO_SHAPE) -> Size:
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    # --- what subclasses define ----------------------------------------------------------------

    @property
    def arg_constraints(self) -> dict:
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{self.__class__} does not implement mean")

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{self.__class__} does not implement variance")

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def rsample(self, sample_shape=_NO_SHAPE) -> Tensor:
        raise NotImplementedError(
            f"{self.__class__.__name__} has no reparameterized sample (rsample); use sample()"
        )

    def sample(self, sample_shape=_NO_SHAPE) -> Tensor:
        """A draw of shape ``sample_shape + batch_shape + event_shape``, without gradient."""
        with grad_mode.no_grad():
            return self.rsample(sample_shape)

    def sample_n(self, n: int) -> Tensor:
        return self.sample(Size((n,)))

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def cdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def icdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError

    def perplexity(self) -> Tensor:
        return self.entropy().exp()

    # --- validation and display ----------------------------------------------------------------

    def _validate_sample(self, value) -> None:
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = value.dim() - len(self._event_shape)
        if Size(tuple(value.shape)[event_dim_start:]) != self._event_shape:
            raise ValueError(
                f"The right-most size of value must match event_shape: {value.size()} vs "
                f"{self._event_shape}."
            )
        actual = value.size()
        expected = Size(tuple(self._batch_shape) + tuple(self._event_shape))
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(
                    f"Value is not broadcastable with batch_shape+event_shape: {actual} vs "
                    f"{expected}."
                )
        if not bool(self.support.check(value).all()):
            raise ValueError(
                "Expected value argument "
                f"({type(value).__name__} of shape {tuple(value.shape)}) "
                f"to be within the support ({self.support!r}) "
                f"of the distribution {self!r}, "
                f"but found invalid values:\n{_shown(value)}"
            )

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        shown = [self.__dict__[p] for p in names]
        args = ", ".join(
            f"{p}: {_shown(v) if v.numel() == 1 else v.size()}" for p, v in zip(names, shown)
        )
        return f"{self.__class__.__name__}({args})"
