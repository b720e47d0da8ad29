"""Warnings autodiag raises for PyTorch point at the user's line, however deep the call."""

import warnings

import autodiag as torch


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return w


def test_deprecated_add_overload_warns_at_the_callers_line(monkeypatch):
    from autodiag.ops import pointwise

    monkeypatch.setattr(pointwise, "_alpha_first_warned", [False])
    p = torch.ones(3)
    w = _caught(lambda: p.add_(-0.1, torch.ones(3)))
    assert len(w) == 1 and "This overload of add_ is deprecated" in str(w[0].message)
    assert w[0].filename == __file__
    assert p.tolist() == [0.8999999761581421] * 3


def test_mismatched_masks_warning_points_at_the_module_call():
    m = torch.nn.MultiheadAttention(4, 2, batch_first=True)
    x = torch.ones(1, 3, 4)
    mask = torch.zeros(1, 3, dtype=torch.bool)

    def call():
        m(x, x, x, key_padding_mask=mask, attn_mask=torch.zeros(3, 3))

    w = [r for r in _caught(call) if "mismatched" in str(r.message)]
    assert w and all(r.filename == __file__ for r in w)


def test_warnings_from_inside_modules_and_functionals_point_at_the_user():
    # a deprecation warning raised several frames down (Module.__call__, forward, the op, its
    # tracing wrapper) named autodiag/trace/events.py (dropout2d) or a module's file
    drop = torch.nn.Dropout2d(0.5)
    x = torch.ones(3, 4)
    for make in (
        lambda: drop(x),
        lambda: torch.nn.MSELoss(size_average=False)(x, x),  # PyTorch's legacy argument
        lambda: torch.nn.LSTM(2, 3, dropout=0.5),  # dropout with one layer
    ):
        w = _caught(make)
        assert w, make
        assert all(r.filename == __file__ for r in w), [(r.filename, str(r.message)) for r in w]
