"""Expression mode: ``-e "(3*x+2)**2" --var x=1`` evaluated without running arbitrary code.

The expression is parsed with ``ast`` and checked node by node against an allow-list *before*
anything is evaluated: arithmetic operators, numeric literals, the ``--var`` names (optionally
indexed with constant integers and slices), and calls of the math functions in ``FUNCTIONS``
with keyword arguments from ``KEYWORDS``. Everything else — attributes, imports, dunder names,
lambdas, comprehensions, strings, subscripts of anything but a variable — is refused with the
position of the offending part. Evaluation then walks the checked tree with an explicit stack.
"""

from __future__ import annotations

import ast
import keyword
import math
import operator

from autodiag.ops import OPS
from autodiag.target.errors import BadExpression, BadInvocation

# The functions an expression may call: the ops registered with ``expr=True`` (ops/_core.py).
FUNCTIONS = tuple(sorted(n for n, info in OPS.items() if info.expr))
KEYWORDS = (
    "dim",
    "keepdim",
    "min",
    "max",
    "p",
    "approximate",
    "negative_slope",
    "beta",
    "threshold",
    "exponent",
    "unbiased",
    "correction",
)
CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}
_ALLOWED = (
    "arithmetic (+ - * / // % ** @, unary -), numbers, the --var names (indexed with "
    "constant integers or slices), and the functions " + " ".join(FUNCTIONS)
)


def parse_var(spec: str):
    """``NAME=VALUE`` (a number or a nested list of numbers) -> (name, value)."""
    name, sep, value = spec.partition("=")
    name = name.strip()
    if not sep:
        raise BadInvocation(
            f"--var {spec!r}: expected NAME=VALUE",
            "For example: --var x=1.5 or --var w='[[1, 2], [3, 4]]'.",
        )
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise BadInvocation(
            f"--var {spec!r}: {name!r} is not a valid variable name",
            "Use a plain identifier such as x or w1.",
        )
    if name in FUNCTIONS or name in CONSTANTS:
        raise BadInvocation(
            f"--var {spec!r}: {name!r} is the name of a function or constant",
            "Pick another variable name.",
        )
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parsed = None
    if not _is_numeric(parsed):
        raise BadInvocation(
            f"--var {spec!r}: {value.strip()!r} is not a number or a nested list of numbers",
            "For example: --var x=2 or --var x='[1, 2, 3]'.",
        )
    ragged = _ragged(parsed)
    if ragged:
        raise BadInvocation(
            f"--var {spec!r}: the nested lists are not rectangular ({ragged})",
            "Every list at the same depth needs the same length, as in a "
            "tensor: --var w='[[1, 2], [3, 4]]'.",
        )
    return name, parsed


def _ragged(v) -> str:
    """Why the nested list ``v`` has no tensor shape (lists of different lengths, or a number
    beside a list at the same depth), or "" when it has one."""
    level = [v]
    depth = 0
    while level:
        lists = [x for x in level if isinstance(x, list)]
        if not lists:
            return ""
        if len(lists) != len(level):
            return f"a number and a list side by side at depth {depth + 1}"
        lengths = {len(x) for x in lists}
        if len(lengths) > 1:
            a, b = sorted(lengths)[:2]
            return f"lists of lengths {a} and {b} at depth {depth + 1}"
        level = [y for x in lists for y in x]
        depth += 1
    return ""


def _is_numeric(v) -> bool:
    stack = [v]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or not isinstance(item, (int, float)):
            return False
    return True


def check(expr: str, var_names) -> ast.Expression:
    """Parse ``expr`` and refuse anything outside the allow-list; nothing is evaluated."""
    if not expr.strip():
        raise BadExpression("the expression is empty", f"Allowed: {_ALLOWED}.")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise BadExpression(
            f"malformed expression: {e.msg} at column {e.offset}",
            f"Allowed: {_ALLOWED}.",
            _caret(expr.strip(), e.offset),
        ) from None
    except (RecursionError, MemoryError):
        # NOTE: str() of these is often empty; the parser gives up on the nesting depth
        raise BadExpression(
            f"the expression is nested too deeply for Python's parser "
            f"({len(expr.strip())} characters)",
            "Simplify the expression: fewer nested parentheses, unary signs or calls.",
        ) from None
    except ValueError as e:
        raise BadExpression(f"malformed expression: {e}", "Simplify the expression.") from None
    known = set(var_names)
    stack = [tree.body]
    while stack:
        node = stack.pop()
        reason = _refusal(node, known)
        if reason:
            raise BadExpression(
                f"{reason} at column {node.col_offset + 1}",
                f"Nothing was run. Allowed: {_ALLOWED}.",
                _caret(expr.strip(), node.col_offset + 1),
            )
        stack.extend(_children(node))
    return tree


def _refusal(node, known: set) -> str | None:
    """Why ``node`` is not allowed, or None."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"the literal {v!r} is not a number"
        return None
    if isinstance(node, ast.Name):
        if node.id.startswith("__"):
            return f"the dunder name {node.id!r} is not allowed"
        if node.id in known or node.id in CONSTANTS:
            return None
        if node.id in FUNCTIONS:
            return f"the function {node.id!r} must be called"
        names = ", ".join(sorted(known)) or "none"
        return f"unknown variable {node.id!r} (defined with --var: {names})"
    if isinstance(node, ast.BinOp):
        return None if type(node.op) in _OPERATORS else "this operator is not allowed"
    if isinstance(node, ast.UnaryOp):
        return (
            None
            if isinstance(node.op, (ast.USub, ast.UAdd))
            else "this unary operator is not allowed"
        )
    if isinstance(node, ast.Call):
        f = node.func
        if not isinstance(f, ast.Name):
            return "only calls of the allowed functions by name are allowed"
        if f.id not in FUNCTIONS:
            return f"calling {f.id!r} is not allowed"
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in KEYWORDS:
                return f"the keyword argument {kw.arg or '**'!r} is not allowed"
        if any(isinstance(a, ast.Starred) for a in node.args):
            return "*args is not allowed"
        return None
    if isinstance(node, ast.Subscript):
        if not (isinstance(node.value, ast.Name) and node.value.id in known):
            return "only the --var names may be indexed"
        return (
            None
            if _constant_index(node.slice)
            else "an index must be made of integer constants and slices"
        )
    if isinstance(node, ast.Attribute):
        return f"attribute access ('.{node.attr}') is not allowed"
    kind = type(node).__name__
    return {
        "Lambda": "lambda is not allowed",
        "ListComp": "comprehensions are not allowed",
        "GeneratorExp": "comprehensions are not allowed",
        "SetComp": "comprehensions are not allowed",
        "DictComp": "comprehensions are not allowed",
        "Compare": "comparisons are not allowed",
        "BoolOp": "and/or is not allowed",
        "IfExp": "conditional expressions are not allowed",
        "NamedExpr": "assignment expressions are not allowed",
        "JoinedStr": "strings are not allowed",
    }.get(kind, f"{kind} is not allowed")


def _constant_index(s) -> bool:
    items = s.elts if isinstance(s, ast.Tuple) else [s]
    for it in items:
        if isinstance(it, ast.Slice):
            parts = [p for p in (it.lower, it.upper, it.step) if p is not None]
        else:
            parts = [it]
        for p in parts:
            if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.USub):
                p = p.operand
            if not (
                isinstance(p, ast.Constant)
                and isinstance(p.value, int)
                and not isinstance(p.value, bool)
            ):
                return False
    return True


def _children(node) -> list:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Call):
        return list(node.args) + [kw.value for kw in node.keywords]
    return []  # constants, names and (checked) subscripts have nothing more to check


def _caret(expr: str, offset) -> str:
    if not offset:
        return ""
    return f"    {expr}\n    {' ' * (offset - 1)}^"


def evaluate(tree: ast.Expression, env: dict):
    """Evaluate a checked tree (post-order, explicit stack) with ``env`` for the names."""
    import autodiag as ad

    values: dict = {}
    stack = [(tree.body, False)]
    while stack:
        node, ready = stack.pop()
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node))
            continue
        if isinstance(node, ast.Constant):
            v = node.value
        elif isinstance(node, ast.Name):
            v = env[node.id] if node.id in env else CONSTANTS[node.id]
        elif isinstance(node, ast.BinOp):
            a, b = values.pop(id(node.left)), values.pop(id(node.right))
            v = _binop(ad, type(node.op), a, b)
        elif isinstance(node, ast.UnaryOp):
            a = values.pop(id(node.operand))
            v = -a if isinstance(node.op, ast.USub) else a
        elif isinstance(node, ast.Call):
            args = [values.pop(id(a)) for a in node.args]
            kwargs = {kw.arg: values.pop(id(kw.value)) for kw in node.keywords}
            v = OPS[node.func.id].op(*args, **kwargs)  # nn.functional's ops too
        else:  # ast.Subscript on a variable, with a constant index
            v = env[node.value.id][_index_value(node.slice)]
        values[id(node)] = v
    return values[id(tree.body)]


def _binop(ad, op, a, b):
    if not isinstance(a, ad.Tensor) and not isinstance(b, ad.Tensor):
        # numbers alone follow tensor semantics too (1/0 is inf, not ZeroDivisionError)
        a = ad.tensor(float(a), dtype=ad.get_default_dtype())
    return _OPERATORS[op](a, b)


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.MatMult: operator.matmul,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
}


def _index_value(s):
    """The Python index of a checked subscript (integers and slices only)."""
    items = s.elts if isinstance(s, ast.Tuple) else [s]
    out = []
    for it in items:
        if isinstance(it, ast.Slice):
            out.append(
                slice(*(None if p is None else _int(p) for p in (it.lower, it.upper, it.step)))
            )
        else:
            out.append(_int(it))
    return tuple(out) if isinstance(s, ast.Tuple) else out[0]


def _int(p) -> int:
    if isinstance(p, ast.UnaryOp):
        return -p.operand.value
    return p.value
