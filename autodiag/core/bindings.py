"""What the engine core calls but does not define: bound once, at import, by the layer that
defines it (NOTE [Layers] in core/__init__.py).

The core sits below ``Tensor`` and below the backward engine, yet a saved output is rebuilt as
a Tensor, an event tells Tensors from other results, ``Tensor.backward`` runs the engine and a
node can be called on explicit gradients. Rather than import upwards (an import cycle), the
higher layer hands these over here: ``tensor.py`` calls ``bind_tensor_type(Tensor)`` and
``autograd/engine.py`` calls ``bind_engine(backward, call_node)``. ``import autodiag`` makes
both before any tensor exists. These are the only calls from a lower layer into a higher one
(tests/test_import_layers.py lists them).
"""

from __future__ import annotations

__all__ = ["bind_tensor_type", "bind_engine"]

# autodiag.tensor.Tensor, once bound
Tensor: type = type(None)


def bind_tensor_type(cls: type) -> None:
    """Make ``cls`` the Tensor class of the core (tensor.py, as it defines it)."""
    global Tensor
    from autodiag.core import graph
    from autodiag.trace import events

    Tensor = cls
    # their hot paths test ``x.__class__ is _Tensor``: a module global is the cheapest read
    graph._Tensor = events._Tensor = cls


def _engine_missing(*args, **kwargs):
    raise RuntimeError("autodiag: the backward engine is not loaded (import autodiag first)")


# autograd.engine.backward(tensors, grad_tensors, retain_graph, create_graph, inputs=...) and
# call_node_directly(node, grads) (``grad_fn(g)``), once bound
backward = _engine_missing
call_node = _engine_missing


def bind_engine(backward_fn, call_node_fn) -> None:
    """Make the backward engine's entry points the core's (autograd/engine.py, at its end)."""
    global backward, call_node
    backward, call_node = backward_fn, call_node_fn
