"""Review of session 16's ops and verdicts against PyTorch 2.13: cases the helpers' tests did not
try (out-of-range flat indices, ...)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")


def _outcome(mod, fn):
    """The values (as numpy arrays) or the exception type and message ``fn(mod)`` gives."""
    try:
        out = fn(mod)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return type(e).__name__, str(e)
    outs = out if isinstance(out, tuple) else (out,)
    return [(np.asarray(o.numpy()), str(o.dtype).rsplit(".", 1)[-1]) for o in outs]


def _same(fn):
    want, got = _outcome(torch, fn), _outcome(autodiag, fn)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and got[0] == want[0], (want, got)
        return
    assert not isinstance(got, tuple), (want, got)
    assert len(got) == len(want), (want, got)
    for (w, wd), (g, gd) in zip(want, got):
        assert gd == wd and g.shape == w.shape and (g == w).all(), (want, got)


@pytest.mark.parametrize(
    "fn",
    [
        # PyTorch divides by the strides and takes each size's modulo: no range check
        lambda T: T.unravel_index(T.tensor(8), (2, 4)),
        lambda T: T.unravel_index(T.tensor([[23, -24, 24, 50, -25, -1]]), (2, 3, 4)),
        lambda T: T.unravel_index(T.tensor([1, 2]), ()),
        lambda T: T.unravel_index(T.tensor([1, 5], dtype=T.uint8), [2, 3]),
        lambda T: T.unravel_index(T.tensor([], dtype=T.int64), (2, 0)),
        lambda T: T.unravel_index(T.tensor(1), (2, 0)),  # RuntimeError: ZeroDivisionError
        lambda T: T.unravel_index(T.tensor(1), (2, -4)),  # ValueError
        lambda T: T.unravel_index(T.tensor(1), 2.0),  # TypeError
        lambda T: T.unravel_index([1, 2], (2, 3)),  # no tensor: refused
    ],
)
def test_unravel_index_as_pytorch(fn):
    _same(fn)
