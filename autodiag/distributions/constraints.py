"""``torch.distributions.constraints``: the sets a parameter or a sample must lie in.

Each constraint's ``check(value)`` gives a boolean tensor (one entry per batch element); its
``repr`` is PyTorch's, since validation errors show it.

>>> import autodiag as torch
>>> from autodiag.distributions import constraints
>>> constraints.positive.check(torch.tensor([1.0, -1.0]))
tensor([ True, False])
>>> constraints.unit_interval
Interval(lower_bound=0.0, upper_bound=1.0)
"""

from __future__ import annotations

__all__ = [
    "Constraint",
    "real",
    "real_vector",
    "positive",
    "unit_interval",
    "simplex",
    "boolean",
    "greater_than",
    "less_than",
    "interval",
    "integer_interval",
    "is_dependent",
]


def _fmt(bound) -> str:
    """A bound as PyTorch's f-string shows it: a 0-d tensor by its value."""
    if hasattr(bound, "dim") and bound.dim() == 0:
        return repr(bound.item())
    return str(bound)


class Constraint:
    """A set of values: ``check(value)`` is True where ``value`` belongs to it."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.__class__.__name__[1:] + "()"


class _Real(Constraint):
    def check(self, value):
        return value == value  # NaN is not real


class _IndependentConstraint(Constraint):
    """``base`` on every element, reduced over the rightmost ``reinterpreted_batch_ndims``."""

    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint = base
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        if n:
            result = result.reshape(tuple(result.shape[: result.dim() - n]) + (-1,)).all(-1)
        return result

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _GreaterThan(Constraint):
    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self) -> str:
        return f"GreaterThan(lower_bound={_fmt(self.lower_bound)})"


class _LessThan(Constraint):
    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={_fmt(self.upper_bound)})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return (
            f"Interval(lower_bound={_fmt(self.lower_bound)}, upper_bound={_fmt(self.upper_bound)})"
        )


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return (
            f"IntegerInterval(lower_bound={_fmt(self.lower_bound)}, "
            f"upper_bound={_fmt(self.upper_bound)})"
        )


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _Simplex(Constraint):
    """Non-negative vectors (the last dimension) that sum to one."""

    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _Dependent(Constraint):
    """A constraint that depends on other parameters: never checked."""

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    return isinstance(constraint, _Dependent)


real = _Real()
real_vector = _IndependentConstraint(real, 1)
positive = _GreaterThan(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
boolean = _Boolean()
dependent = _Dependent()
greater_than = _GreaterThan
less_than = _LessThan
interval = _Interval
integer_interval = _IntegerInterval
