"""The fuzzer's op table: each op once, as the code of one call that runs on both libraries.

An op's generator ``gen(g)`` picks its tensor arguments from the program's pool (or asks for a
fresh input of a fitting shape) and returns the call as Python source over pool names, with
``torch`` and ``F`` free: the same text is evaluated with ``torch`` bound to ``autodiag`` and to
PyTorch, and is the line a repro prints. ``g`` is a ``fuzzer.Gen`` (its helpers: ``rng``,
``pick``, ``new``, ``dim``, ``scalar``, ``lit``).

Statement ops (``stmt=True``: ``x[i] = v``, ``x += y``) are executed; their result is the
mutated first argument.

``refuse`` is the name an autodiag ``NotImplementedError`` for this op must carry to count as a
clear refusal rather than a difference (default: the op's name up to the first ``_``-suffix-free
word, see ``Op.refusal_names``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Op:
    name: str
    family: str
    gen: Callable
    stmt: bool = False
    weight: float = 1.0
    refuse: tuple = field(default=())

    @property
    def refusal_names(self) -> tuple:
        """Names one of which a NotImplementedError message must contain."""
        return self.refuse or (self.name.split(".")[0].rstrip("_"),)


OPS: dict[str, Op] = {}


def op(name, family, *, stmt=False, weight=1.0, refuse=()):
    def register(gen):
        OPS[name] = Op(name, family, gen, stmt, weight, tuple(refuse))
        return gen

    return register


def _shape(t) -> tuple:
    return tuple(t.shape)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1]


def _reshape_target(rng, shape) -> tuple:
    """A random shape with the same number of elements (maybe with one -1)."""
    n = int(np.prod(shape, dtype=np.int64))
    dims = []
    rest = n
    for _ in range(int(rng.integers(0, 4))):
        if rest == 0:
            dims.append(int(rng.choice([0, 1, 2])))
            rest = 0 if dims[-1] == 0 else rest
            continue
        d = int(rng.choice(_divisors(rest)))
        dims.append(d)
        rest //= d
    if rest != 1 or (n == 0 and 0 not in dims):
        dims.append(rest)
    if dims and n and rng.random() < 0.3:
        dims[int(rng.integers(len(dims)))] = -1
    return tuple(dims)


# ---------------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------------

for _f in (
    "neg",
    "abs",
    "exp",
    "log",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "reciprocal",
):
    op(_f, "elementwise")(lambda g, _f=_f: f"torch.{_f}({g.pick()})")

op("abs.method", "elementwise", refuse=("abs",))(lambda g: f"{g.pick()}.abs()")
op("neg.operator", "elementwise", refuse=("neg",))(lambda g: f"-{g.pick()}")


@op("pow.scalar_exponent", "elementwise", weight=2, refuse=("pow",))
def _(g):
    p = g.rng.choice([2, 3, 0.5, -1, 0, -0.5, 2.5, 1, -2, 0.0])
    return f"{g.pick()} ** {g.lit(p)}"


@op("pow.scalar_base", "elementwise", refuse=("pow",))
def _(g):
    return f"({g.lit(g.rng.choice([2.0, 0.5, 0.0, -1.0, 1.0]))}) ** {g.pick()}"


for _sym, _nm in (("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "div")):
    op(f"{_nm}.scalar", "elementwise", refuse=(_nm,))(
        lambda g, _sym=_sym: f"{g.pick()} {_sym} {g.lit(g.scalar())}"
    )
    op(f"{_nm}.rscalar", "elementwise", refuse=(_nm, "rsub", "rdiv", "reciprocal"))(
        lambda g, _sym=_sym: f"{g.lit(g.scalar())} {_sym} {g.pick()}"
    )


@op("clamp", "elementwise", weight=1.5)
def _(g):
    lo = None if g.rng.random() < 0.3 else g.scalar()
    hi = None if lo is None or g.rng.random() < 0.5 else g.scalar()
    return f"torch.clamp({g.pick()}, min={g.lit(lo)}, max={g.lit(hi)})"


@op("clamp.tensor", "elementwise", refuse=("clamp",))
def _(g):
    x = g.pick()
    return f"torch.clamp({x}, min={g.partner(x, 'bcast')})"


@op("leaky_relu", "nn.functional")
def _(g):
    return f"F.leaky_relu({g.pick()}, {g.lit(g.rng.choice([0.01, 0.2, -0.5, 0.0]))})"


@op("gelu", "nn.functional")
def _(g):
    approx = g.rng.choice(["none", "tanh"])
    return f"F.gelu({g.pick()}, approximate={approx!r})"


@op("softplus", "nn.functional")
def _(g):
    beta = g.rng.choice([1, 2, 0.5])
    threshold = g.rng.choice([20, 1, 0.5])
    return f"F.softplus({g.pick()}, beta={beta!r}, threshold={threshold!r})"


op("relu.functional", "nn.functional", refuse=("relu",))(lambda g: f"F.relu({g.pick()})")

# ---------------------------------------------------------------------------------------------
# Binary (broadcasting)
# ---------------------------------------------------------------------------------------------

for _sym, _nm in (("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "div")):
    op(_nm, "binary", weight=1.5)(
        lambda g, _sym=_sym: (lambda x: f"{x} {_sym} {g.partner(x, 'bcast')}")(g.pick())
    )

for _nm in ("pow", "maximum", "minimum", "remainder"):
    op(_nm, "binary")(
        lambda g, _nm=_nm: (lambda x: f"torch.{_nm}({x}, {g.partner(x, 'bcast')})")(g.pick())
    )


@op("where", "binary", weight=1.5)
def _(g):
    x = g.pick()
    y = g.partner(x, "bcast")
    if g.rng.random() < 0.5:
        return f"torch.where({g.partner(x, 'bcast', kind='bool')}, {x}, {y})"
    return f"torch.where({x} > {y}, {x}, {y})"


@op("masked_fill", "binary")
def _(g):
    x = g.pick()
    return f"{x}.masked_fill({g.partner(x, 'within', kind='bool')}, {g.lit(g.scalar())})"


# comparisons: no gradient, bool results that feed where/masked_fill/indexing
@op("gt", "comparison", weight=0.5)
def _(g):
    x = g.pick()
    return f"{x} > {g.partner(x, 'bcast')}"


op("eq", "comparison", weight=0.3)(
    lambda g: (lambda x: f"{x} == {g.partner(x, 'bcast')}")(g.pick())
)
op("isnan", "comparison", weight=0.3)(lambda g: f"torch.isnan({g.pick()})")
op("isfinite", "comparison", weight=0.3)(lambda g: f"torch.isfinite({g.pick()})")
op("logical_not", "comparison", weight=0.2)(lambda g: f"~torch.isinf({g.pick()})")

# ---------------------------------------------------------------------------------------------
# Reductions and softmax
# ---------------------------------------------------------------------------------------------


def _dims_arg(g, nd):
    """dim= for reductions taking int, tuple or nothing."""
    r = g.rng.random()
    if r < 0.25:
        return ""
    if r < 0.6 or nd == 0:
        return f"dim={g.dim(nd)}"
    k = int(g.rng.integers(0, nd + 1))
    dims = tuple(int(d) for d in g.rng.permutation(nd)[:k])
    return f"dim={dims!r}"


def _keepdim(g):
    return ", keepdim=True" if g.rng.random() < 0.4 else ""


for _nm in ("sum", "mean", "amax", "amin"):

    @op(_nm, "reduction", weight=1.2)
    def _(g, _nm=_nm):
        x = g.pick()
        d = _dims_arg(g, g.ndim(x))
        if not d:
            return f"{x}.{_nm}()" if _nm in ("sum", "mean") else f"torch.{_nm}({x})"
        return f"{x}.{_nm}({d}{_keepdim(g)})"


@op("prod", "reduction")
def _(g):
    x = g.pick()
    if g.rng.random() < 0.4:
        return f"{x}.prod()"
    return f"{x}.prod(dim={g.dim(g.ndim(x))}{_keepdim(g)})"


for _nm in ("max", "min"):

    @op(_nm, "reduction")
    def _(g, _nm=_nm):
        x = g.pick()
        r = g.rng.random()
        if r < 0.35:
            return f"{x}.{_nm}()"
        if r < 0.5:
            return f"torch.{_nm}({x}, {g.partner(x, 'bcast')})"
        part = g.rng.choice(["values", "indices"])
        return f"{x}.{_nm}(dim={g.dim(g.ndim(x))}{_keepdim(g)}).{part}"


for _nm in ("argmax", "argmin"):

    @op(_nm, "reduction", weight=0.5)
    def _(g, _nm=_nm):
        x = g.pick()
        if g.rng.random() < 0.3:
            return f"{x}.{_nm}()"
        return f"{x}.{_nm}(dim={g.dim(g.ndim(x))}{_keepdim(g)})"


for _nm in ("var", "std"):

    @op(_nm, "reduction")
    def _(g, _nm=_nm):
        x = g.pick()
        d = _dims_arg(g, g.ndim(x))
        c = g.rng.choice(
            ["", ", correction=0", ", correction=1", ", correction=2", ", unbiased=False"]
        )
        if not d:
            return f"{x}.{_nm}({c[2:]})"
        return f"{x}.{_nm}({d}{c}{_keepdim(g)})"


@op("norm", "reduction")
def _(g):
    x = g.pick()
    p = g.rng.choice([2, 1, "inf", 3, 0.5])
    p = "float('inf')" if p == "inf" else repr(p)
    if g.rng.random() < 0.4:
        return f"{x}.norm(p={p})"
    return f"{x}.norm(p={p}, dim={g.dim(g.ndim(x))}{_keepdim(g)})"


@op("logsumexp", "reduction")
def _(g):
    x = g.pick()
    return f"torch.logsumexp({x}, dim={g.dim(g.ndim(x))}{_keepdim(g)})"


for _nm in ("softmax", "log_softmax"):
    op(_nm, "softmax", weight=1.2)(
        lambda g, _nm=_nm: (lambda x: f"torch.{_nm}({x}, dim={g.dim(g.ndim(x))})")(g.pick())
    )
    op(f"{_nm}.functional", "softmax", weight=0.5, refuse=(_nm,))(
        lambda g, _nm=_nm: (lambda x: f"F.{_nm}({x}, dim={g.dim(g.ndim(x))})")(g.pick())
    )

# ---------------------------------------------------------------------------------------------
# Matmul family
# ---------------------------------------------------------------------------------------------


@op("matmul", "matmul", weight=1.5)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    return (
        f"torch.matmul({x}, {g.partner(x, 'matmul')})"
        if g.rng.random() < 0.5
        else f"{x} @ {g.partner(x, 'matmul')}"
    )


@op("mm", "matmul")
def _(g):
    x = g.pick(lambda t: t.ndim == 2, shape=g.shape(2, 2))
    return f"torch.mm({x}, {g.partner(x, 'mm')})"


@op("bmm", "matmul", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim == 3, shape=g.shape(3, 3))
    return f"torch.bmm({x}, {g.partner(x, 'bmm')})"


@op("dot", "matmul", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim == 1, shape=g.shape(1, 1))
    return f"torch.dot({x}, {g.partner(x, 'same')})"


@op("outer", "matmul", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim == 1, shape=g.shape(1, 1))
    return f"torch.outer({x}, {g.partner(x, 'vector')})"


@op("mv", "matmul", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim == 2, shape=g.shape(2, 2))
    return f"torch.mv({x}, {g.partner(x, 'mv')})"


@op("einsum", "matmul", weight=1.2)
def _(g):
    """An equation over x's dims: repeated labels (diagonals) where sizes allow, up to two more
    operands sharing some labels (size 1 where they broadcast), an ellipsis, explicit or
    implicit output."""
    r = g.rng
    x = g.pick(lambda t: t.ndim <= 4)
    sx = g.shape_of(x)
    lx = list("ijkl"[: len(sx)])
    for a in range(len(sx)):
        for b in range(a + 1, len(sx)):
            if sx[a] == sx[b] and lx[b] == "ijkl"[b] and r.random() < 0.25:
                lx[b] = lx[a]  # a diagonal
    ell = bool(sx) and r.random() < 0.2  # x's first dim under "..."
    sizes = dict(zip(lx, sx))
    names, subs = [x], ["..." + "".join(lx[1:]) if ell else "".join(lx)]
    for extra in "pq"[: int(r.choice([0, 1, 1, 1, 2]))]:
        labels = [lb for lb in dict.fromkeys(lx[1:] if ell else lx) if r.random() < 0.6]
        labels += [extra] * int(r.random() < 0.6)
        r.shuffle(labels)
        shape = [1 if r.random() < 0.1 else sizes.get(lb, int(r.integers(0, 4))) for lb in labels]
        sizes.update((lb, n) for lb, n in zip(labels, shape) if n != 1)
        lead = "..." if ell and r.random() < 0.7 else ""
        if lead:
            shape = [int(r.choice([sx[0], 1]))][: int(r.integers(0, 2))] + shape
        names.append(g.new(tuple(shape)))
        subs.append(lead + "".join(labels))
    eq = ",".join(subs)
    if r.random() < 0.7:
        used = list(dict.fromkeys(c for c in eq if c.isalpha()))
        out = [c for c in r.permutation(used) if r.random() < 0.6]
        if ell and r.random() < 0.8:
            out.insert(int(r.integers(0, len(out) + 1)), "...")
        eq += "->" + "".join(out)
    return f"torch.einsum({eq!r}, {', '.join(names)})"


# ---------------------------------------------------------------------------------------------
# Views and shape ops
# ---------------------------------------------------------------------------------------------


@op("reshape", "view", weight=1.5)
def _(g):
    x = g.pick()
    return f"{x}.reshape({_reshape_target(g.rng, g.shape_of(x))!r})"


@op("view", "view")
def _(g):
    x = g.pick()
    return f"{x}.view({_reshape_target(g.rng, g.shape_of(x))!r})"


@op("flatten", "view")
def _(g):
    x = g.pick()
    nd = g.ndim(x)
    if g.rng.random() < 0.5 or nd < 2:
        return f"{x}.flatten()"
    a, b = sorted(int(d) for d in g.rng.integers(0, nd, 2))
    return f"{x}.flatten({a}, {b})"


@op("squeeze", "view")
def _(g):
    x = g.pick()
    if g.rng.random() < 0.4:
        return f"{x}.squeeze()"
    return f"{x}.squeeze({g.dim(g.ndim(x))})"


op("unsqueeze", "view")(lambda g: (lambda x: f"{x}.unsqueeze({g.dim(g.ndim(x) + 1)})")(g.pick()))
op("transpose", "view")(
    lambda g: (lambda x: f"{x}.transpose({g.dim(g.ndim(x))}, {g.dim(g.ndim(x))})")(g.pick())
)
op("t", "view", weight=0.5)(lambda g: f"{g.pick(lambda t: t.ndim <= 2)}.t()")
op("mT", "view", weight=0.5, refuse=("mT", "transpose"))(
    lambda g: f"{g.pick(lambda t: t.ndim >= 2, shape=g.shape(2, 3))}.mT"
)
op("contiguous", "view", weight=0.3)(lambda g: f"{g.pick()}.contiguous()")
op("clone", "view", weight=0.5)(lambda g: f"{g.pick()}.clone()")
op("detach", "view", weight=0.3)(lambda g: f"{g.pick()}.detach()")


@op("permute", "view")
def _(g):
    x = g.pick()
    return f"{x}.permute({tuple(int(d) for d in g.rng.permutation(g.ndim(x)))!r})"


@op("expand", "view")
def _(g):
    x = g.pick()
    shape = [
        int(g.rng.integers(1, 4))
        if s == 1 and g.rng.random() < 0.6
        else (-1 if g.rng.random() < 0.3 else s)
        for s in g.shape_of(x)
    ]
    if g.rng.random() < 0.4:
        shape.insert(0, int(g.rng.integers(0, 3)))
    return f"{x}.expand({tuple(shape)!r})"


op("expand_as", "view", weight=0.4)(
    lambda g: (lambda x: f"{x}.expand_as({g.partner(x, 'expand_target')})")(g.pick())
)


@op("repeat", "view")
def _(g):
    x = g.pick()
    reps = [int(g.rng.integers(0, 3)) for _ in range(g.ndim(x) + int(g.rng.integers(0, 2)))]
    return f"{x}.repeat({tuple(reps)!r})"


@op("narrow", "view")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    d = g.dim(g.ndim(x))
    n = g.size_at(x, d)
    start = int(g.rng.integers(0, n + 1))
    return f"{x}.narrow({d}, {start}, {int(g.rng.integers(0, n - start + 1))})"


@op("select", "view")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1 and 0 not in t.shape)
    d = g.dim(g.ndim(x))
    n = max(g.size_at(x, d), 1)
    return f"{x}.select({d}, {int(g.rng.integers(-n, n))})"


@op("unflatten", "view", weight=0.5)
def _(g):
    x = g.pick()
    d = g.dim(g.ndim(x))
    n = g.size_at(x, d)
    a = int(g.rng.choice(_divisors(n)))
    sizes = (a, n // a if a else 0) if g.rng.random() < 0.7 else (-1, a)
    return f"{x}.unflatten({d}, {sizes!r})"


# ---------------------------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------------------------


def _basic_index(g, x) -> str:
    """A basic index expression for x: ints, slices, None, Ellipsis."""
    parts = []
    for s in g.shape_of(x)[: int(g.rng.integers(1, max(g.ndim(x), 1) + 1))]:
        r = g.rng.random()
        if r < 0.35 and s > 0:
            parts.append(str(int(g.rng.integers(-s, s))))
        elif r < 0.85:
            a = int(g.rng.integers(-s - 1, s + 1)) if g.rng.random() < 0.5 else None
            b = int(g.rng.integers(-s - 1, s + 2)) if g.rng.random() < 0.5 else None
            st = int(g.rng.choice([1, 1, 2, 3])) if g.rng.random() < 0.4 else None
            parts.append(":".join("" if v is None else str(v) for v in (a, b, st)))
        else:
            parts.append("None")
    if g.rng.random() < 0.2:
        parts.insert(int(g.rng.integers(0, len(parts) + 1)), "...")
    return ", ".join(parts) or "..."


op("index.basic", "indexing", weight=1.5, refuse=("getitem", "index", "slice"))(
    lambda g: (lambda x: f"{x}[{_basic_index(g, x)}]")(g.pick())
)


@op("index.advanced", "indexing", refuse=("getitem", "index"))
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    n = g.shape_of(x)[0]
    idx = [int(i) for i in g.rng.integers(-n, n, int(g.rng.integers(0, 4)))] if n else []
    rest = ", ..." if g.rng.random() < 0.3 else ""
    return f"{x}[torch.tensor({idx!r}, dtype=torch.int64){rest}]"


@op("index.mask", "indexing", refuse=("getitem", "index", "mask"))
def _(g):
    x = g.pick()
    if g.rng.random() < 0.5:
        return f"{x}[{x} > 0]"
    return f"{x}[{g.partner(x, 'same', kind='bool')}]"


@op("index_select", "indexing")
def _(g):
    x = g.pick()
    d = g.dim(g.ndim(x))
    n = g.size_at(x, d)
    idx = [int(i) for i in g.rng.integers(0, n, int(g.rng.integers(0, 4)))] if n else []
    return f"torch.index_select({x}, {d}, torch.tensor({idx!r}, dtype=torch.int64))"


@op("gather", "indexing")
def _(g):
    x = g.pick()
    d = g.dim(g.ndim(x))
    shape = list(g.shape_of(x))
    n = g.size_at(x, d)
    if shape:
        shape = [int(g.rng.integers(0, s + 1)) for s in shape]
        dd = d % len(shape)
        shape[dd] = int(g.rng.integers(0, 4)) if n else 0
    idx = g.rng.integers(0, max(n, 1), shape).tolist()
    return f"torch.gather({x}, {d}, torch.tensor({idx!r}, dtype=torch.int64))"


@op("setitem", "indexing", stmt=True, weight=1.2, refuse=("setitem", "CopySlices", "index"))
def _(g):
    x = g.pick()
    value = g.lit(g.scalar()) if g.rng.random() < 0.4 else g.partner(x, "scalar_tensor")
    if g.rng.random() < 0.2:
        return f"{x}[{x} > 0] = {value}"
    return f"{x}[{_basic_index(g, x)}] = {value}"


# ---------------------------------------------------------------------------------------------
# Combining
# ---------------------------------------------------------------------------------------------


@op("cat", "combining")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    d = g.dim(g.ndim(x))
    return f"torch.cat([{x}, {g.partner(x, 'cat', at=d)}], dim={d})"


@op("stack", "combining")
def _(g):
    x = g.pick()
    return f"torch.stack([{x}, {g.partner(x, 'same')}], dim={g.dim(g.ndim(x) + 1)})"


@op("split", "combining")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    d = g.dim(g.ndim(x))
    k = int(g.rng.integers(1, 3))
    return f"{x}.split({k}, dim={d})[{int(g.rng.integers(0, 2))}]"


@op("chunk", "combining")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    d = g.dim(g.ndim(x))
    return f"{x}.chunk({int(g.rng.integers(1, 4))}, dim={d})[{int(g.rng.integers(-1, 1))}]"


@op("unbind", "combining", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1 and 0 not in t.shape)
    d = g.dim(g.ndim(x))
    return f"{x}.unbind({d})[{int(g.rng.integers(-1, 1))}]"


# ---------------------------------------------------------------------------------------------
# In-place
# ---------------------------------------------------------------------------------------------

for _nm in ("add_", "sub_", "mul_", "div_"):

    @op(_nm, "inplace")
    def _(g, _nm=_nm):
        x = g.pick(inplace=True)
        other = g.lit(g.scalar()) if g.rng.random() < 0.4 else g.partner(x, "within")
        return f"{x}.{_nm}({other})"


for _nm in ("relu_", "exp_", "sigmoid_", "tanh_", "neg_", "zero_", "abs_", "sqrt_"):
    op(_nm, "inplace", weight=0.5)(lambda g, _nm=_nm: f"{g.pick(inplace=True)}.{_nm}()")


@op("clamp_", "inplace", weight=0.5)
def _(g):
    return f"{g.pick(inplace=True)}.clamp_(min={g.lit(g.scalar())})"


op("fill_", "inplace", weight=0.5)(lambda g: f"{g.pick(inplace=True)}.fill_({g.lit(g.scalar())})")
op("pow_", "inplace", weight=0.5)(
    lambda g: f"{g.pick(inplace=True)}.pow_({g.lit(g.rng.choice([2, 0.5, -1, 0]))})"
)


@op("copy_", "inplace", weight=0.5)
def _(g):
    x = g.pick(inplace=True)
    return f"{x}.copy_({g.partner(x, 'within')})"


@op("iadd", "inplace", stmt=True, weight=0.5, refuse=("add", "iadd"))
def _(g):
    x = g.pick(inplace=True)
    return f"{x} += {g.partner(x, 'within')}"


@op("view.mul_", "inplace", weight=0.8, refuse=("mul_", "mul"))
def _(g):
    x = g.pick(lambda t: t.ndim >= 1, inplace=True)
    return f"{x}[{_basic_index(g, x)}].mul_({g.lit(g.scalar())})"


# ---------------------------------------------------------------------------------------------
# nn.functional
# ---------------------------------------------------------------------------------------------


@op("linear", "nn.functional")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    k = g.shape_of(x)[-1]
    out = int(g.rng.integers(0, 4))
    w = g.new((out, k))
    b = f", {g.new((out,))}" if g.rng.random() < 0.6 else ""
    return f"F.linear({x}, {w}{b})"


def _reduction(g):
    return g.rng.choice(["mean", "sum", "none"])


@op("mse_loss", "nn.functional")
def _(g):
    x = g.pick()
    return f"F.mse_loss({x}, {g.partner(x, 'same')}, reduction={_reduction(g)!r})"


@op("binary_cross_entropy_with_logits", "nn.functional")
def _(g):
    x = g.pick()
    return (
        f"F.binary_cross_entropy_with_logits({x}, {g.partner(x, 'same')}, "
        f"reduction={_reduction(g)!r})"
    )


def _targets(g, x):
    n, c = g.shape_of(x)
    return g.rng.integers(0, max(c, 1), n).tolist()


@op("cross_entropy", "nn.functional")
def _(g):
    x = g.pick(lambda t: t.ndim == 2 and t.shape[1] > 0, shape=g.shape(2, 2, min_size=1))
    return (
        f"F.cross_entropy({x}, torch.tensor({_targets(g, x)!r}, dtype=torch.int64), "
        f"reduction={_reduction(g)!r})"
    )


@op("nll_loss", "nn.functional")
def _(g):
    x = g.pick(lambda t: t.ndim == 2 and t.shape[1] > 0, shape=g.shape(2, 2, min_size=1))
    return (
        f"F.nll_loss({x}, torch.tensor({_targets(g, x)!r}, dtype=torch.int64), "
        f"reduction={_reduction(g)!r})"
    )


@op("layer_norm", "nn.functional")
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    shape = g.shape_of(x)
    k = int(g.rng.integers(1, len(shape) + 1))
    norm = tuple(shape[-k:])
    wb = ""
    if g.rng.random() < 0.5:
        wb = f", {g.new(norm)}, {g.new(norm)}"
    return f"F.layer_norm({x}, {norm!r}{wb}, eps={g.lit(g.rng.choice([1e-5, 0.0, 1.0]))})"


@op("dropout", "nn.functional", weight=0.3)
def _(g):
    return f"F.dropout({g.pick()}, p={g.rng.choice([0.0, 0.5])!r}, training=False)"


@op("embedding", "nn.functional", weight=0.5)
def _(g):
    w = g.pick(lambda t: t.ndim == 2 and t.shape[0] > 0, shape=g.shape(2, 2, min_size=1))
    n = g.shape_of(w)[0]
    idx = g.rng.integers(0, n, int(g.rng.integers(0, 4))).tolist()
    return f"F.embedding(torch.tensor({idx!r}, dtype=torch.int64), {w})"


# ---------------------------------------------------------------------------------------------
# Scans, sorting, clamp and where forms, more activations and losses, conv/pooling/norms
# ---------------------------------------------------------------------------------------------

for _nm in ("cumsum", "cumprod"):
    op(_nm, "reduction", weight=0.7)(
        lambda g, _nm=_nm: (lambda x: f"torch.{_nm}({x}, dim={g.dim(max(g.ndim(x), 1))})")(g.pick())
    )


@op("sort", "reduction", weight=0.5)
def _(g):
    x = g.pick()
    d = g.dim(max(g.ndim(x), 1))
    return f"torch.sort({x}, dim={d}, descending={bool(g.rng.random() < 0.5)})[0]"


@op("topk", "reduction", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    d = g.dim(g.ndim(x))
    k = int(g.rng.integers(0, g.size_at(x, d) + 1))
    return f"torch.topk({x}, {k}, dim={d})[0]"


op("flip", "view", weight=0.4)(
    lambda g: (lambda x: f"torch.flip({x}, ({g.dim(max(g.ndim(x), 1))},))")(g.pick())
)
op("clamp_min", "elementwise", weight=0.5)(
    lambda g: f"torch.clamp_min({g.pick()}, {g.lit(g.scalar())})"
)
op("clamp_max", "elementwise", weight=0.5)(
    lambda g: f"torch.clamp_max({g.pick()}, {g.lit(g.scalar())})"
)


@op("where.scalar", "binary", weight=0.7, refuse=("where",))
def _(g):
    x = g.pick()
    c = g.partner(x, "bcast", kind="bool")
    if g.rng.random() < 0.5:
        return f"torch.where({c}, {x}, {g.lit(g.scalar())})"
    return f"torch.where({c}, {g.lit(g.scalar())}, {x})"


for _nm in ("silu", "elu"):
    op(_nm, "nn.functional", weight=0.5)(lambda g, _nm=_nm: f"F.{_nm}({g.pick()})")

for _nm in ("l1_loss", "smooth_l1_loss", "huber_loss"):
    op(_nm, "nn.functional", weight=0.5)(
        lambda g, _nm=_nm: (
            lambda x: f"F.{_nm}({x}, {g.partner(x, 'same')}, reduction={_reduction(g)!r})"
        )(g.pick())
    )


@op("conv1d", "nn.functional", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim == 3 and 0 not in t.shape, shape=g.shape(3, 3, min_size=1))
    n, c, length = g.shape_of(x)
    k = int(g.rng.integers(1, length + 1))
    w = g.new((int(g.rng.integers(1, 3)), c, k))
    return f"F.conv1d({x}, {w}, padding={int(g.rng.integers(0, 2))})"


@op("max_pool1d", "nn.functional", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim == 3 and 0 not in t.shape, shape=g.shape(3, 3, min_size=1))
    k = int(g.rng.integers(1, g.shape_of(x)[2] + 1))
    return f"F.max_pool1d({x}, {k})"


@op("group_norm", "nn.functional", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 2 and 0 not in t.shape, shape=g.shape(2, 3, min_size=1))
    c = g.shape_of(x)[1]
    groups = int(g.rng.choice([d for d in range(1, c + 1) if c % d == 0]))
    return f"F.group_norm({x}, {groups})"


# Ops of the section above whose difference classes are still open (measured with
# ``run.py --extended --ops ...``, 600 programs: group_norm's statistics (NaN where PyTorch's
# Welford merge overflows), conv1d's non-finite float32 values (PyTorch's oneDNN path sums in
# another order, -inf vs inf where terms overflow; its zero padding: known_issues.py), topk's
# order among ties (README)): drawn only with ``--extended`` or by name, so that the CI budget
# stays a measure of the fixed classes. An op leaves this set when its classes are fixed (elu).
EXTENDED = frozenset({"conv1d", "group_norm", "topk", "max_pool1d"}) | {
    # fuzz8's ops with open classes (run.py --ops ..., 2,817 programs): batch_norm's statistics
    # (the sign of a zero, inf/NaN where they overflow, as layer_norm's), conv2d's non-finite
    # float32 values (oneDNN, as conv1d's), lerp's sign of a zero (weight 1 at end = -0.0),
    # clamp between two tensors' tied zeros
    "batch_norm",
    "conv2d",
    "lerp",
    "lerp_",
    "clamp.both_tensors",
}


# ---------------------------------------------------------------------------------------------
# fuzz8: more of issue 17's families (elementwise, views, indexing, in-place, nn.functional)
# ---------------------------------------------------------------------------------------------

for _nm in ("erf", "sgn"):
    op(_nm, "elementwise", weight=0.4)(lambda g, _nm=_nm: f"torch.{_nm}({g.pick()})")


@op("lerp", "binary", weight=0.5)
def _(g):
    x = g.pick()
    w = g.lit(g.scalar()) if g.rng.random() < 0.5 else g.partner(x, "within")
    return f"torch.lerp({x}, {g.partner(x, 'within')}, {w})"


@op("rsub", "binary", weight=0.4)
def _(g):
    x = g.pick()
    return f"torch.rsub({x}, {g.partner(x, 'bcast')})"


@op("clamp.both_tensors", "elementwise", weight=0.5, refuse=("clamp",))
def _(g):
    x = g.pick()
    return f"torch.clamp({x}, {g.partner(x, 'within')}, {g.partner(x, 'within')})"


for _nm in ("tril", "triu"):
    op(_nm, "view", weight=0.4)(
        lambda g, _nm=_nm: (
            f"torch.{_nm}({g.pick(lambda t: t.ndim >= 2)}, {int(g.rng.integers(-2, 3))})"
        )
    )


@op("diagonal", "view", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 2)
    nd = g.ndim(x)
    d1 = g.dim(nd)
    d2 = (d1 + 1) % nd
    return f"torch.diagonal({x}, {int(g.rng.integers(-2, 3))}, {d1}, {d2})"


@op("movedim", "view", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    nd = g.ndim(x)
    return f"torch.movedim({x}, {g.dim(nd)}, {g.dim(nd)})"


@op("roll", "view", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    return f"torch.roll({x}, {int(g.rng.integers(-3, 4))}, {g.dim(g.ndim(x))})"


@op("repeat_interleave", "view", weight=0.3)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    return f"torch.repeat_interleave({x}, {int(g.rng.integers(0, 3))}, dim={g.dim(g.ndim(x))})"


@op("setitem.advanced", "indexing", stmt=True, weight=0.6, refuse=("setitem", "index"))
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    n = g.shape_of(x)[0]
    idx = sorted({int(i) for i in g.rng.integers(0, n, int(g.rng.integers(0, 3)))}) if n else []
    value = g.lit(g.scalar()) if g.rng.random() < 0.3 else g.partner(x, "scalar_tensor")
    return f"{x}[torch.tensor({idx!r}, dtype=torch.int64)] = {value}"


@op("masked_fill_", "inplace", weight=0.5)
def _(g):
    x = g.pick(inplace=True)
    m = g.partner(x, "within", kind="bool")
    value = g.lit(g.scalar()) if g.rng.random() < 0.5 else g.partner(x, "scalar_tensor")
    if value.startswith("x") or value.startswith("t"):
        value = f"{value}.reshape(())"  # masked_fill takes a 0-d value tensor
    return f"{x}.masked_fill_({m}, {value})"


@op("lerp_", "inplace", weight=0.4)
def _(g):
    x = g.pick(inplace=True)
    return f"{x}.lerp_({g.partner(x, 'within')}, {g.lit(g.scalar())})"


@op("clamp_.tensor", "inplace", weight=0.4, refuse=("clamp_", "clamp"))
def _(g):
    x = g.pick(inplace=True)
    return f"{x}.clamp_(max={g.partner(x, 'within')})"


op("tril_", "inplace", weight=0.3)(
    lambda g: f"{g.pick(lambda t: t.ndim >= 2, inplace=True)}.tril_({int(g.rng.integers(-1, 2))})"
)


@op("normalize", "nn.functional", weight=0.5)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    p = g.rng.choice([2.0, 1.0, 3.0])
    return f"F.normalize({x}, p={p!r}, dim={g.dim(g.ndim(x))})"


@op("kl_div", "nn.functional", weight=0.4)
def _(g):
    x = g.pick()
    red = g.rng.choice(["mean", "sum", "none", "batchmean"])
    log_target = bool(g.rng.random() < 0.5)
    return f"F.kl_div({x}, {g.partner(x, 'same')}, reduction={red!r}, log_target={log_target})"


@op("binary_cross_entropy", "nn.functional", weight=0.4)
def _(g):
    x = g.pick()
    return (
        f"F.binary_cross_entropy(torch.sigmoid({x}), torch.sigmoid({g.partner(x, 'same')}), "
        f"reduction={_reduction(g)!r})"
    )


@op("margin_ranking_loss", "nn.functional", weight=0.3)
def _(g):
    x = g.pick()
    return (
        f"F.margin_ranking_loss({x}, {g.partner(x, 'same')}, torch.sign({g.partner(x, 'same')}), "
        f"margin={g.rng.choice([0.0, 0.5])!r}, reduction={_reduction(g)!r})"
    )


@op("pad", "nn.functional", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 1)
    pads = [
        int(v) for v in g.rng.integers(-1, 3, 2 * int(g.rng.integers(1, min(g.ndim(x), 2) + 1)))
    ]
    return f"F.pad({x}, {tuple(pads)!r}, value={g.lit(g.scalar())})"


@op("batch_norm", "nn.functional", weight=0.4)
def _(g):
    x = g.pick(lambda t: t.ndim >= 2 and 0 not in t.shape, shape=g.shape(2, 3, min_size=1))
    c = g.shape_of(x)[1]
    wb = f", {g.new((c,))}, {g.new((c,))}" if g.rng.random() < 0.5 else ", None, None"
    return (
        f"F.batch_norm({x}, None, None{wb}, training=True, eps={g.lit(g.rng.choice([1e-5, 1.0]))})"
    )


@op("avg_pool2d", "nn.functional", weight=0.3)
def _(g):
    x = g.pick(lambda t: t.ndim == 4 and 0 not in t.shape, shape=g.shape(4, 4, min_size=1))
    k = int(g.rng.integers(1, min(g.shape_of(x)[2:]) + 1))
    return f"F.avg_pool2d({x}, {k})"


@op("conv2d", "nn.functional", weight=0.3)
def _(g):
    x = g.pick(lambda t: t.ndim == 4 and 0 not in t.shape, shape=g.shape(4, 4, min_size=1))
    n, c, h, w_ = g.shape_of(x)
    w = g.new(
        (
            int(g.rng.integers(1, 3)),
            c,
            int(g.rng.integers(1, h + 1)),
            int(g.rng.integers(1, w_ + 1)),
        )
    )
    return f"F.conv2d({x}, {w}, padding={int(g.rng.integers(0, 2))})"


FUZZ8 = frozenset(
    {
        "erf",
        "sgn",
        "lerp",
        "rsub",
        "clamp.both_tensors",
        "tril",
        "triu",
        "diagonal",
        "movedim",
        "roll",
        "repeat_interleave",
        "setitem.advanced",
        "masked_fill_",
        "lerp_",
        "clamp_.tensor",
        "tril_",
        "normalize",
        "kl_div",
        "binary_cross_entropy",
        "margin_ranking_loss",
        "pad",
        "batch_norm",
        "avg_pool2d",
        "conv2d",
    }
)
