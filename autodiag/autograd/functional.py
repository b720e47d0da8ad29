"""``autograd.functional``: Jacobians, Hessians and vector products of whole functions.

Each function takes ``func`` and the point ``inputs`` (a Tensor or a tuple of Tensors) and
returns results shaped like PyTorch's: a single Tensor in gives a single Tensor out, a tuple in
gives a tuple out. Everything is built on ``autograd.grad``:

- ``vjp``: one backward pass, ``vᵀJ``.
- ``jvp``: PyTorch's double-vjp trick. ``g(u) = uᵀJ`` is linear in ``u``, so differentiating
  ``g(u)`` with respect to ``u`` in the direction ``v`` gives ``Jv`` without forward-mode AD.
- ``jacobian``: one backward pass per output element (row by row).
- ``hessian``: the Jacobian of the Jacobian.
- ``vhp`` / ``hvp``: ``vᵀH`` by differentiating the gradient, ``Hv`` by the double-vjp trick on
  the gradient.

``vectorize`` and ``strategy="forward-mode"`` are accepted for compatibility and change nothing
in the result: autodiag has no batched vmap and no forward-mode AD, so every Jacobian is
computed row by row in reverse mode (same values; PyTorch's argument errors are still raised).
"""

from __future__ import annotations

from autodiag.core import grad_mode
from autodiag.tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


# ---------------------------------------------------------------------------------------------
# Tuples in, tuples out
# ---------------------------------------------------------------------------------------------


def _tupled(value, arg_name: str, fn_name: str) -> tuple[bool, tuple]:
    """(was it a tuple, the Tensors as a tuple); anything but Tensors raises PyTorch's TypeError."""
    is_tuple = isinstance(value, tuple)
    items = value if is_tuple else (value,)
    for i, el in enumerate(items):
        if not isinstance(el, Tensor):
            where = (
                f"the value at index {i} has type {type(el)}"
                if is_tuple
                else f"the given {arg_name} has type {type(el)}"
            )
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                f"tuple of Tensors but {where}."
            )
    return is_tuple, items


def _untuple(res, was_tuple):
    """Undo ``_tupled``: ``was_tuple`` is one flag, or (outer, inner) for nested results."""
    if isinstance(was_tuple, tuple):
        outer, inner = was_tuple
        if not inner:
            res = tuple(el[0] for el in res)
        return res if outer else res[0]
    return res if was_tuple else res[0]


def _fresh(tensors, create_graph: bool, need_graph: bool) -> tuple:
    """New Tensor objects for the inputs, so that the function's use of *these* objects is told
    apart from tensors it captured itself (pytorch/pytorch#32576). Under ``create_graph`` an input
    that requires grad stays connected to its history (a view); otherwise it is detached."""
    out = []
    for t in tensors:
        if create_graph and t.requires_grad:
            out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(need_graph))
    return tuple(out)


def _detached(results, create_graph: bool) -> tuple:
    """Results without history unless the caller asked for a differentiable result."""
    if create_graph:
        return results
    if isinstance(results[0], Tensor):
        return tuple(r.detach() for r in results)
    return tuple(_detached(r, create_graph) for r in results)


def _check_v(v, like, like_is_tuple: bool) -> None:
    if len(v) != len(like):
        if like_is_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(like)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, like)):
        if a.size() != b.size():
            where = f"Entry {i} in " if like_is_tuple else ""
            raise RuntimeError(
                f"{where}v has invalid size: should be {b.size()} but got {a.size()}."
            )


def _tupled_v(v, like, like_is_tuple: bool, fn_name: str, create_graph: bool) -> tuple:
    _, v = _tupled(v, "v", fn_name)
    v = _fresh(v, create_graph, need_graph=False)
    _check_v(v, like, like_is_tuple)
    return v


_STRICT_MESSAGES = {
    "outputs": (
        "Output {i} of the user-provided function does not require gradients. The "
        "outputs must be computed in a differentiable manner from the input when running "
        "in strict mode."
    ),
    "grad_inputs": (
        "The gradient with respect to input {i} is independent of the inputs of the "
        "user-provided function. This is not allowed in strict mode."
    ),
    "jacobian": (
        "While computing the hessian, found that the jacobian of the user-provided "
        "function with respect to input {i} is independent of the input. This is not "
        "allowed in strict mode. You should ensure that your function is twice "
        "differentiable and that the jacobian depends on the inputs (this would be "
        "violated by a linear function for example)."
    ),
    "hessian": (
        "The hessian of the user-provided function with respect to input {i} is "
        "independent of the input. This is not allowed in strict mode. You should ensure "
        "that your function is thrice differentiable and that the hessian depends on the "
        "inputs."
    ),
}


def _check_requires_grad(tensors, kind: str, strict: bool) -> None:
    """In strict mode, every tensor must depend on the inputs (PyTorch's messages)."""
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:  # only gradients can be None
            raise RuntimeError(
                f"The output of the user-provided function is independent of "
                f"input {i}. This is not allowed in strict mode."
            )
        if not t.requires_grad:
            raise RuntimeError(_STRICT_MESSAGES[kind].format(i=i))


def _grad(
    outputs: tuple, inputs: tuple, grad_outputs=None, create_graph: bool = False, retain_graph=None
) -> tuple:
    """``autograd.grad`` that skips outputs needing no grad (None for every input if none do)."""
    from autodiag.autograd import grad

    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    outs, gos = zip(*pairs)
    return grad(
        outs, inputs, gos, allow_unused=True, create_graph=create_graph, retain_graph=retain_graph
    )


_MISSING_MESSAGES = {
    # stage -> (None gradient in strict mode, gradient without history under create_graph)
    "back": (
        "The output of the user-provided function is independent of input {i}. This is "
        "not allowed in strict mode.",
        "The jacobian of the user-provided function is independent of input {i}. This is "
        "not allowed in strict mode when create_graph=True.",
    ),
    "back_trick": (
        "The gradient with respect to the input is independent of entry {i} in the "
        "grad_outputs when using the double backward trick to compute forward mode "
        "gradients. This is not allowed in strict mode.",
        "The jacobian of the user-provided function is independent of input {i}. "
        "This is not allowed in strict mode when create_graph=True.",
    ),
    "double_back": (
        "The jacobian of the user-provided function is independent of input {i}. "
        "This is not allowed in strict mode.",
        "The hessian of the user-provided function is independent of input {i}. "
        "This is not allowed in strict mode when create_graph=True.",
    ),
    "double_back_trick": (
        "The hessian of the user-provided function is independent of entry "
        "{i} in the grad_jacobian. This is not allowed in strict mode as it "
        "prevents from using the double backward trick to replace forward "
        "mode AD.",
        "The hessian of the user-provided function is independent of input "
        "{i}. This is not allowed in strict mode when create_graph=True.",
    ),
}


def _zeros_for_missing(grads, refs, strict: bool, create_graph: bool, stage: str) -> tuple:
    """A missing (None) gradient is mathematically zero; strict mode refuses it instead."""
    from autodiag.ops.factories import zeros_like

    missing, no_history = _MISSING_MESSAGES[stage]
    out = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(missing.format(i=i))
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            raise RuntimeError(no_history.format(i=i))
        out.append(g)
    return tuple(out)


def _single_scalar_output(outputs, outputs_tuple: bool, fn_name: str) -> None:
    if outputs_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {fn_name} should "
            f"contain a single element"
        )


def _need_v_scalar_input(inputs) -> None:
    if len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError(
            "The vector v can only be None if the input to the user-provided "
            "function is a single Tensor with a single element."
        )


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), vᵀ·J)``: the vector-Jacobian product at ``inputs``.

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import vjp
    >>> vjp(lambda x: x ** 2, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    (tensor([1., 4.]), tensor([2., 8.]))
    """
    with grad_mode.enable_grad():
        inputs_tuple, inputs = _tupled(inputs, "inputs", "vjp")
        inputs = _fresh(inputs, create_graph, need_graph=True)
        outputs_tuple, outputs = _tupled(
            func(*inputs), "outputs of the user-provided function", "vjp"
        )
        _check_requires_grad(outputs, "outputs", strict)
        if v is not None:
            v = _tupled_v(v, outputs, outputs_tuple, "vjp", create_graph)
        elif len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the user-provided function "
                "returns a single Tensor with a single element."
            )
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        res = _grad(outputs, inputs, v, create_graph=create_graph)
        res = _zeros_for_missing(res, inputs, strict, create_graph, "back")
    return (
        _untuple(_detached(outputs, create_graph), outputs_tuple),
        _untuple(_detached(res, create_graph), inputs_tuple),
    )


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J·v)``: the Jacobian-vector product, by the double-vjp trick.

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import jvp
    >>> jvp(lambda x: x ** 2, torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
    (tensor([1., 4.]), tensor([2., 8.]))
    """
    from autodiag.ops.factories import zeros_like

    with grad_mode.enable_grad():
        inputs_tuple, inputs = _tupled(inputs, "inputs", "jvp")
        inputs = _fresh(inputs, create_graph, need_graph=True)
        if v is not None:
            v = _tupled_v(v, inputs, inputs_tuple, "jvp", create_graph)
        else:
            _need_v_scalar_input(inputs)
        outputs_tuple, outputs = _tupled(
            func(*inputs), "outputs of the user-provided function", "jvp"
        )
        _check_requires_grad(outputs, "outputs", strict)
        # uᵀJ is linear in u: its value at u = 0 is irrelevant, only that it is finite.
        us = tuple(zeros_like(o, requires_grad=True) for o in outputs)
        u_j = _grad(outputs, inputs, us, create_graph=True)
        _check_requires_grad(u_j, "grad_inputs", strict)
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        res = _grad(u_j, us, v, create_graph=create_graph)
        res = _zeros_for_missing(res, outputs, strict, create_graph, "back_trick")
    return (
        _untuple(_detached(outputs, create_graph), outputs_tuple),
        _untuple(_detached(res, create_graph), outputs_tuple),
    )


def jacobian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of ``func`` at ``inputs``, of shape ``output.shape + input.shape``.

    A tuple of outputs and/or inputs gives nested tuples ``J[i][j]`` (output i, input j).
    ``vectorize`` and ``strategy`` change nothing but PyTorch's argument errors: the Jacobian is
    always built row by row in reverse mode.

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import jacobian
    >>> jacobian(lambda x: x ** 2, torch.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". '
            "Hint: If your function has more outputs than inputs, "
            '"forward-mode" tends to be more performant. Otherwise, prefer to '
            'use "reverse-mode".'
        )
    if strategy == "forward-mode":
        _check_forward_mode_args(create_graph, strict, vectorize)
    with grad_mode.enable_grad():
        inputs_tuple, inputs = _tupled(inputs, "inputs", "jacobian")
        inputs = _fresh(inputs, create_graph, need_graph=True)
        outputs_tuple, outputs = _tupled(
            func(*inputs), "outputs of the user-provided function", "jacobian"
        )
        _check_requires_grad(outputs, "outputs", strict)
        if vectorize and strict and strategy == "reverse-mode":
            raise RuntimeError(
                "torch.autograd.functional.jacobian: `strict=True` and "
                "`vectorized=True` are not supported together. Please either set "
                "`strict=False` or `vectorize=False`."
            )
        jac = tuple(
            _jacobian_of_output(i, out, inputs, create_graph, strict)
            for i, out in enumerate(outputs)
        )
        return _untuple(_detached(jac, create_graph), (outputs_tuple, inputs_tuple))


def _check_forward_mode_args(create_graph: bool, strict: bool, vectorize: bool) -> None:
    if create_graph:
        raise NotImplementedError(
            "torch.autograd.functional.jacobian: `create_graph=True` and "
            '`strategy="forward-mode"` are not supported together (yet). '
            "Please either set `create_graph=False` or "
            '`strategy="reverse-mode"`.'
        )
    if strict:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` and "
            '`strategy="forward-mode"` are not supported together (yet). Please '
            'either set `strict=False` or `strategy="reverse-mode"`.'
        )
    if not vectorize:
        # "isonly": PyTorch's message, missing space included
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse "
            "Hessian isonly implemented for `vectorize=True`."
        )


def _jacobian_of_output(i: int, out, inputs, create_graph: bool, strict: bool) -> tuple:
    """J[i][j] for every input j: one backward pass per element of output ``i``."""
    from autodiag.ops.factories import zeros_like
    from autodiag.ops.shape import stack

    rows: list[list] = [[] for _ in inputs]
    flat = out.reshape(-1)
    for k in range(out.numel()):
        grads = _grad((flat[k],), inputs, retain_graph=True, create_graph=create_graph)
        for j, (g, inp) in enumerate(zip(grads, inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(
                        f"Output {i} of the user-provided function is independent "
                        f"of input {j}. This is not allowed in strict mode."
                    )
                g = zeros_like(inp)
            elif strict and create_graph and not g.requires_grad:
                raise RuntimeError(
                    f"The jacobian of the user-provided function is independent "
                    f"of input {i}. This is not allowed in strict mode when "
                    f"create_graph=True."
                )
            rows[j].append(g)
    return tuple(
        stack(r, 0).view(tuple(out.shape) + tuple(inp.shape)) for r, inp in zip(rows, inputs)
    )


def hessian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of a scalar function: ``H[i][j]`` of shape ``inputs[i].shape +
    inputs[j].shape`` (a single Tensor for a single input).

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import hessian
    >>> hessian(lambda x: (x ** 3).sum(), torch.tensor([1.0, 1.5]))
    tensor([[6., 0.],
            [0., 9.]])
    """
    inputs_tuple, inputs = _tupled(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def scalar_func(*inp):
        out = func(*inp)
        out_tuple, outs = _tupled(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(outs, "outputs", strict)
        if out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(
                "The Tensor returned by the function given to hessian should "
                "contain a single element"
            )
        return out.squeeze()

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(scalar_func, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    res = jacobian(
        jac_func,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return _untuple(res, (inputs_tuple, inputs_tuple))


def _scalar_gradient(func, inputs, v, create_graph: bool, strict: bool, api: str):
    """The first half of vhp/hvp (under enable_grad): checked inputs and ``v``, the scalar output
    and its gradient with a graph. Returns (inputs_tuple, inputs, v, outputs_tuple, outputs,
    jac)."""
    inputs_tuple, inputs = _tupled(inputs, "inputs", api)
    inputs = _fresh(inputs, create_graph, need_graph=True)
    if v is not None:
        v = _tupled_v(v, inputs, inputs_tuple, api, create_graph)
    else:
        _need_v_scalar_input(inputs)
    outputs_tuple, outputs = _tupled(func(*inputs), "outputs of the user-provided function", api)
    _check_requires_grad(outputs, "outputs", strict)
    _single_scalar_output(outputs, outputs_tuple, api)
    jac = _grad(outputs, inputs, create_graph=True)
    _check_requires_grad(jac, "jacobian", strict)
    return inputs_tuple, inputs, v, outputs_tuple, outputs, jac


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), vᵀ·H)`` for a scalar function: the gradient, differentiated along v.

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import vhp
    >>> vhp(lambda x: (x ** 3).sum(), torch.tensor([1.0, 1.5]), torch.tensor([1.0, 1.0]))
    (tensor(4.3750), tensor([6., 9.]))
    """
    with grad_mode.enable_grad():
        inputs_tuple, inputs, v, outputs_tuple, outputs, jac = _scalar_gradient(
            func, inputs, v, create_graph, strict, "vhp"
        )
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        res = _grad(jac, inputs, v, create_graph=create_graph)
        res = _zeros_for_missing(res, inputs, strict, create_graph, "double_back")
    return (
        _untuple(_detached(outputs, create_graph), outputs_tuple),
        _untuple(_detached(res, create_graph), inputs_tuple),
    )


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H·v)`` for a scalar function, by the double-vjp trick on the gradient.

    >>> import autodiag as torch
    >>> from autodiag.autograd.functional import hvp
    >>> hvp(lambda x: (x ** 3).sum(), torch.tensor([1.0, 1.5]), torch.tensor([1.0, 1.0]))
    (tensor(4.3750), tensor([6., 9.]))
    """
    from autodiag.ops.factories import zeros_like

    with grad_mode.enable_grad():
        inputs_tuple, inputs, v, outputs_tuple, outputs, jac = _scalar_gradient(
            func, inputs, v, create_graph, strict, "hvp"
        )
        us = tuple(zeros_like(t, requires_grad=True) for t in inputs)
        u_h = _grad(jac, inputs, us, create_graph=True)
        # PyTorch checks ``jac`` again here (not ``u_h``); kept so that strict errors agree.
        _check_requires_grad(jac, "hessian", strict)
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        res = _grad(u_h, us, v, create_graph=create_graph)
        res = _zeros_for_missing(res, inputs, strict, create_graph, "double_back_trick")
    return (
        _untuple(_detached(outputs, create_graph), outputs_tuple),
        _untuple(_detached(res, create_graph), inputs_tuple),
    )
