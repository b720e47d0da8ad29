"""``Parameter``: a leaf Tensor that a Module registers as one of its parameters."""

from __future__ import annotations

from autodiag.tensor import REQUIRES_GRAD_DTYPE_ERROR, Tensor, _init, vc_of


class Parameter(Tensor):
    """A Tensor that is a module parameter: a leaf that requires grad (by default) and shares
    storage and version counter with the tensor it was made from.

    >>> import autodiag as torch
    >>> p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    >>> p
    Parameter containing:
    tensor([1., 2.], requires_grad=True)
    >>> p.is_leaf, type(p * 2).__name__
    (True, 'Tensor')
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from autodiag.ops.factories import empty

            data = empty(0)
        p = object.__new__(cls)
        # detached from data's graph; same storage and version counter, as PyTorch's
        # _make_subclass(cls, data.detach(), requires_grad)
        _init(p, data._data, None, False, vc_of(data), 0)
        if data._inference:
            p._inference = True
        if requires_grad:
            if p._data.dtype.kind not in "fc":
                raise RuntimeError(REQUIRES_GRAD_DTYPE_ERROR)
            p.requires_grad_(True)
        return p

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        pass  # everything happens in __new__ (Tensor.__init__ would reset the data)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self._data.copy(), self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        p = Parameter(Tensor._make(self._data.copy()), self.requires_grad)
        if self._grad is not None:
            p._grad = self._grad.__deepcopy__(memo)
        memo[id(self)] = p
        return p


def _rebuild_parameter(data, requires_grad):
    return Parameter(Tensor._make(data), requires_grad)


class Buffer(Tensor):
    """Marks a tensor as a buffer when assigned to a Module attribute (``nn.Buffer``)."""

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            from autodiag.ops.factories import empty

            data = empty(0)
        b = object.__new__(cls)
        _init(b, data._data, None, data.requires_grad, vc_of(data), 0)
        b.persistent = persistent
        return b

    def __init__(self, data=None, *, persistent: bool = True):
        pass


def __getattr__(name: str):
    # ``torch.nn.parameter.UninitializedParameter``: defined with the lazy modules (it needs
    # the module machinery this module must not import)
    if name in ("UninitializedParameter", "UninitializedBuffer"):
        from autodiag.nn.modules import lazy

        return getattr(lazy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
