"""What PyTorch scripts touch first, against PyTorch (the oracle): the bugs real scripts hit
(``requires_grad_()`` on a non-leaf, ``vec[i] += 1``) and the compatibility names (devices,
``to``, legacy tensor types, ``torch.save``/``torch.load``, ...). Each test runs the same code
with ``T`` = torch and ``T`` = autodiag and compares."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad


def both(torch):
    return [("torch", torch), ("autodiag", ad)]


# --- bugs found running tutorials ---------------------------------------------------------------


def test_requires_grad_on_a_non_leaf_that_requires_grad_is_a_no_op(torch):
    out = {}
    for name, T in both(torch):
        x = T.ones(2, requires_grad=True)
        y = x * 2
        r = y.requires_grad_()
        assert r is y and y.requires_grad and not y.is_leaf
        with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
            y.requires_grad_(False)
        t = T.tensor([0.3, 1.2, -0.5], dtype=T.float64, requires_grad=True)
        out[name] = (type(y.grad_fn).__name__,
                     T.autograd.gradgradcheck(T.exp, (t.clone(),)))
    assert out["autodiag"] == out["torch"] == ("MulBackward0", True)


def _bag_of_words(T, dtype):
    vocab = {"a": 0, "b": 1, "c": 2, "d": 3}
    vec = T.zeros(len(vocab), dtype=dtype)
    for word in "a b a d a".split():
        vec[vocab[word]] += 1
    vec[T.tensor(2)] += 5
    m = T.zeros(2, 3, dtype=dtype)
    m[1, 2] += 2
    m[0][1] += 3
    return vec.tolist(), m.tolist(), vec._version


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_item_increment_of_a_1d_tensor(torch, dtype):
    got = _bag_of_words(ad, getattr(ad, dtype))
    assert got == _bag_of_words(torch, getattr(torch, dtype))
    assert got[0] == [3, 1, 5, 1]


def test_an_element_is_a_view_that_writes_through(torch):
    out = {}
    for name, T in both(torch):
        v = T.arange(4.0)
        e = v[2]
        e.add_(10)
        e.mul_(2)
        out[name] = (v.tolist(), e.item(), e._base is v, e.shape, v._version)
    assert out["autodiag"] == out["torch"]
    assert out["torch"][0] == [0.0, 1.0, 24.0, 3.0]
