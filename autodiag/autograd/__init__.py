"""``autodiag.autograd``: backward, grad, custom Functions, grad modes, graph utilities."""

from __future__ import annotations

import warnings

import numpy as np

from autodiag.autograd import anomaly, functional, graph
from autodiag.autograd._gradcheck import GradcheckError, gradcheck, gradgradcheck
from autodiag.autograd.anomaly import detect_anomaly, set_detect_anomaly
from autodiag.autograd.engine import GraphTask, execute
from autodiag.autograd.function import Function, FunctionCtx, once_differentiable
from autodiag.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from autodiag.ops._core import edge, wrap
from autodiag.tensor import Tensor

from autodiag.compat import Variable  # noqa: E402 - torch.autograd.Variable: a tensor

__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "graph",
           "functional", "gradcheck", "gradgradcheck", "GradcheckError",
           "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "detect_anomaly", "set_detect_anomaly"]

anomaly_mode = anomaly  # PyTorch's module name: torch.autograd.anomaly_mode.detect_anomaly

_CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter "
    "and its gradient which can cause a memory leak. We recommend using autograd.grad when "
    "creating the graph to avoid this. If you have to use this function, make sure to reset the "
    ".grad fields of your parameters to None after use to break the cycle and avoid the leak."
)
_warned_create_graph = [False]


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _size(shape) -> str:
    return f"torch.Size([{', '.join(map(str, shape))}])"


def _make_grads(outputs, grad_outputs, create_graph: bool) -> list:
    """Seed gradients: 1 for scalar outputs, else the given ones (shape-checked)."""
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.requires_grad:
                if out._data.size != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if out._data.dtype.kind != "f":
                    raise RuntimeError(f"grad can be implicitly created only for real scalar "
                                       f"outputs but got {out.dtype}")
                seed = np.ones(out._data.shape, dtype=out._data.dtype)
                grads.append(wrap(seed) if create_graph else seed)
            else:
                grads.append(None)
            continue
        if not isinstance(g, Tensor):
            g = wrap(np.asarray(g, dtype=out._data.dtype))
        if g._data.shape != out._data.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{_size(g._data.shape)} and output[{i}] has a shape of "
                               f"{_size(out._data.shape)}.")
        if create_graph:
            grads.append(g)
        else:
            d = g._data
            grads.append(d if d.dtype == out._data.dtype else d.astype(out._data.dtype))
    return grads


def _root_edges(outputs):
    edges = []
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               f"a grad_fn")
        edges.append(graph.edge_pair(edge(out)))
    return edges


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False,
             grad_variables=None, inputs=None) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (or of ``inputs``)."""
    outputs = _as_tuple(tensors)
    if grad_tensors is None:
        grad_tensors = grad_variables
    gts = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(outputs)
    if len(gts) != len(outputs):
        raise RuntimeError(f"got {len(gts)} tensors and {len(outputs)} gradients")
    inputs = _as_tuple(inputs) if inputs is not None else None
    if inputs is not None and len(inputs) == 0:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if create_graph and not _warned_create_graph[0]:
        _warned_create_graph[0] = True
        warnings.warn(_CREATE_GRAPH_WARNING, UserWarning, stacklevel=3)
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(outputs)
    grads = _make_grads(outputs, gts, create_graph)
    task = GraphTask(retain_graph, create_graph, accumulate=True, roots=outputs, inputs=inputs)
    if inputs is not None:
        _set_targets(task, edges, inputs, capture=False)
    execute(edges, grads, task)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused=None, is_grads_batched: bool = False,
         materialize_grads: bool = False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated).

    >>> import autodiag as torch
    >>> x = torch.tensor(3.0, requires_grad=True)
    >>> torch.autograd.grad(x ** 2, x)
    (tensor(6.),)
    """
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads="
                         "True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    if is_grads_batched:
        raise NotImplementedError("autodiag: autograd.grad(is_grads_batched=True) is not "
                                  "supported")
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    if len(ins) == 0:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    gos = _as_tuple(grad_outputs) if grad_outputs is not None else (None,) * len(outs)
    if len(gos) != len(outs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(gos)} "
                           f"grad_outputs and {len(outs)} outputs")
    for t in ins:
        if not isinstance(t, Tensor):
            raise TypeError(f"grad(): inputs must be Tensors, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(outs)
    grads = _make_grads(outs, gos, create_graph)
    task = GraphTask(retain_graph, create_graph, accumulate=False, roots=outs, inputs=ins)
    _set_targets(task, edges, ins, capture=True)
    execute(edges, grads, task)
    result = []
    for i, (t, g) in enumerate(zip(ins, task.captured)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have "
                                   f"been used in the graph. Set allow_unused=True if this is "
                                   f"the desired behavior.")
            if materialize_grads:
                g = np.zeros(t._data.shape, dtype=t._data.dtype)
        if g is None:
            result.append(None)
        elif isinstance(g, Tensor):
            result.append(g)
        else:
            result.append(wrap(np.array(g, dtype=t._data.dtype)))
    return tuple(result)


def _set_targets(task: GraphTask, root_edges, inputs, capture: bool) -> None:
    from autodiag.autograd.engine import _mark_needed

    targets: dict = {}  # (node, input_nr) -> input positions captured there
    leaf_targets = set()
    for i, t in enumerate(inputs):
        if t.grad_fn is None:
            ref = t._acc
            node = ref() if ref is not None else None
            if node is None:
                continue  # the leaf takes part in no graph
            key = (node, 0)
            leaf_targets.add(node)
        else:
            key = (t.grad_fn, t._output_nr)
            if not capture:
                t.retain_grad()
        targets.setdefault(key, []).append(i)
    needed = _mark_needed([e[0] for e in root_edges], {k[0] for k in targets})
    task.needed = needed
    # backward(inputs=...) runs the input's own node too (PyTorch marks it needed); grad() only
    # captures there and runs a node only when some gradient must flow on below it.
    task.execute = needed if not capture else {
        n for n in needed if any(c is not None and c in needed for c in graph.children(n))}
    task.leaf_targets = leaf_targets
    if capture:
        task.targets = targets
        task.captured = [None] * len(inputs)
