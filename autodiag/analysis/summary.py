"""Short numeric summaries of tensors and gradients, shared by the analyses."""

from __future__ import annotations

import json
from array import array

import numpy as np

from autodiag import inspect
from autodiag.inspect import name_of_dtype as dtype_name

SMALL = 8  # tensors with at most this many elements are shown in full


def summarize(a) -> dict | None:
    """{'shape', 'dtype', 'min', 'max', 'mean', 'nan', 'inf', 'zeros', 'values'?} of an array-like
    (a numpy array or a Tensor); None for None."""
    if a is None:
        return None
    data = np.asarray(inspect.values(a))  # read at call time: another engine may answer
    out = {"shape": list(data.shape), "dtype": dtype_name(data.dtype)}
    if data.size == 0:
        return out
    if data.dtype.kind in "fc":
        finite = np.isfinite(data)
        n_nan = int(np.isnan(data).sum())
        n_inf = int(data.size - finite.sum() - n_nan)
        vals = data[finite] if not finite.all() else data
        if vals.size:
            out.update(min=float(vals.min()), max=float(vals.max()), mean=float(vals.mean()))
        out.update(nan=n_nan, inf=n_inf)
    elif data.dtype.kind in "iub":
        out.update(
            min=_num(data.min()),
            max=_num(data.max()),
            mean=float(data.mean()) if data.dtype.kind != "b" else None,
        )
    out["zeros"] = int(data.size - np.count_nonzero(data))
    if data.size <= SMALL:
        out["values"] = data.tolist()
    return out


_ndarray = np.ndarray


class Summaries:
    """Many summaries, stored compactly: ``add(a)`` keeps what ``summarize(a)`` would say and
    returns its position; ``get(k)`` rebuilds the dict.

    NOTE: a huge graph of tiny tensors (a 1,000,000-op chain of scalars) would spend ~600 bytes
    and ~15 µs of numpy reductions per ``summarize`` dict. A one-element float array is
    summarised by its value alone: 9 bytes here (the value, and a code for its shape and
    dtype), a few hundred nanoseconds, the same dict on ``get``. Other arrays keep their dict."""

    __slots__ = ("values", "codes", "kinds", "dicts", "_code_of", "_tmpl", "memo")

    NONE, DICT = 0, 1  # codes; 2 + k: a one-element float array of ``kinds[k]``

    def __init__(self):
        self.values = array("d")  # the element; for DICT the position in ``dicts``
        self.codes = array("H")
        self.kinds: list[tuple] = []  # (shape, dtype name)
        self.dicts: list[dict] = []
        self._code_of: dict = {}  # (dimensions, numpy dtype) -> code
        # (numpy dtype, dimensions, code) of the last encode: BackwardTrace.on_op reads it
        self.memo: tuple = (None, -1, 0)
        self._tmpl: dict = {}  # code -> its one-element summaries' JSON templates

    def __len__(self) -> int:
        return len(self.codes)

    def encode(self, a) -> tuple[int, float] | None:
        """(code, value) of a one-element float array (a Tensor's data counts), None for
        anything else."""
        data = a if a.__class__ is _ndarray else inspect.values(a)
        if data.__class__ is _ndarray and data.size == 1:
            dt = data.dtype
            # NOTE: a one-element array's shape is all ones: its dimension count says it. A
            # trace sees one dtype and shape over and over: the last code is remembered
            nd = data.ndim
            memo = self.memo
            if dt is memo[0] and nd == memo[1]:
                return memo[2], data.item()
            if dt.kind != "f":
                return None
            code = self._code_of.get((nd, dt))
            if code is None:
                if len(self.kinds) >= 65535 - 2:  # codes are 16-bit: summarise as a dict
                    return None
                code = self._code_of[(nd, dt)] = 2 + len(self.kinds)
                self.kinds.append(((1,) * nd, dtype_name(dt)))
            self.memo = (dt, nd, code)
            return code, data.item()
        return None

    def decode(self, code: int, value: float) -> dict | None:
        """The summary of an encoded array (``NONE``: None)."""
        if code == self.NONE:
            return None
        if code == self.DICT:
            return self.dicts[int(value)]
        shape, dtype = self.kinds[code - 2]
        return scalar_summary(value, shape, dtype)

    def add(self, a) -> int:
        k = len(self.codes)
        cv = None if a is None else self.encode(a)
        if cv is None:
            self.add_unencoded(a)
        else:
            self.codes.append(cv[0])
            self.values.append(cv[1])
        return k

    def add_encoded(self, code: int, value: float) -> None:
        """Add a one-element float array by its ``encode``d form."""
        self.codes.append(code)
        self.values.append(value)

    def add_unencoded(self, a) -> None:
        """Add what ``encode`` returned None for: None, or anything summarised as a dict."""
        if a is None:
            self.codes.append(self.NONE)
            self.values.append(0.0)
        else:
            self.codes.append(self.DICT)
            self.values.append(len(self.dicts))
            self.dicts.append(summarize(a))

    def get(self, k: int) -> dict | None:
        return self.decode(self.codes[k], self.values[k])

    def json(self, k: int, cache: dict | None = None) -> str:
        """``json.dumps(self.get(k))``, written directly for a one-element float summary.
        ``cache``: (code, value) -> text, shared by the calls of one report (a chain passes
        each gradient on: the same summary twice in a row)."""
        code, v = self.codes[k], self.values[k]
        if code < 2 or v - v != 0:  # None, a dict, NaN or Inf: rare, the general encoder
            return _dumps(self.decode(code, v))
        if cache is None or v == 0:  # 0.0 == -0.0, but their texts differ
            return self.scalar_json(code, v)
        text = cache.get((code, v))
        if text is None:
            if len(cache) >= 4096:
                cache.clear()
            text = cache[(code, v)] = self.scalar_json(code, v)
        return text

    def scalar_json(self, code: int, v: float) -> str:
        """``json.dumps(self.decode(code, v))`` of a one-element float summary (``code`` >= 2)
        of a finite ``v``."""
        t = self._tmpl.get(code)
        head, opening, closing = t if t is not None else self._templates(code)
        r = repr(v)  # json's own text for a finite float
        if v == 0:  # NOTE: mean(-0.0) is 0.0; zeros counts it
            return (
                f'{head}{r}, "max": {r}, "mean": 0.0, "nan": 0, "inf": 0, "zeros": 1, '
                f'"values": {opening}{r}{closing}}}'
            )
        return (
            f'{head}{r}, "max": {r}, "mean": {r}, "nan": 0, "inf": 0, "zeros": 0, '
            f'"values": {opening}{r}{closing}}}'
        )

    def _templates(self, code: int) -> tuple[str, str, str]:
        """The fixed texts of a one-element summary of ``code``: up to its minimum, and the
        brackets around its ``values``."""
        shape, dtype = self.kinds[code - 2]
        t = self._tmpl[code] = (
            f'{{"shape": {_dumps(list(shape))}, "dtype": {_dumps(dtype)}, "min": ',
            "[" * len(shape),
            "]" * len(shape),
        )
        return t


def scalar_summary(v: float, shape: tuple, dtype: str) -> dict:
    """``summarize`` of a one-element float array of ``shape`` holding ``v``."""
    out = {"shape": list(shape), "dtype": dtype}
    if v - v == 0:  # finite
        out.update(min=v, max=v, mean=v + 0.0, nan=0, inf=0)  # NOTE: mean(-0.0) is 0.0
    else:
        out.update(nan=1 if v != v else 0, inf=0 if v != v else 1)
    out["zeros"] = 1 if v == 0 else 0
    values = v
    for _ in shape:
        values = [values]
    out["values"] = values
    return out


def _dumps(o) -> str:
    return json.dumps(o)


def _num(v):
    return v.item() if hasattr(v, "item") else v


def fmt_bytes(n: float) -> str:
    """A byte count for people: ``512 B``, ``36.2 KB``, ``1.0 MB`` (negative for shrinkage).
    Here rather than in ``report/values.py``: the leak findings' messages use it too.

    >>> fmt_bytes(37080), fmt_bytes(-544), fmt_bytes(3 << 30)
    ('36.2 KB', '-544 B', '3.0 GB')
    """
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
