"""MultiplicativeLR, PolynomialLR, ChainedScheduler, CyclicLR and CosineAnnealingWarmRestarts
against PyTorch 2.13: learning rates (and momenta, betas) of every param group over 45 steps,
bit for bit; state_dict round trips that resume on PyTorch's sequence; errors."""

from __future__ import annotations

import warnings

import pytest
from differential import same_error
from test_lr_scheduler_torch import Warmup, _groups_view, _lambda, _opt

import autodiag as ad

torch = pytest.importorskip("torch")

STEPS = 45


class Scale:
    """A callable scale_fn object: CyclicLR saves its __dict__."""

    def __init__(self):
        self.k = 0.7

    def __call__(self, x):
        return self.k**x


SCHEDULES = [
    ("multiplicative", "SGD", {}, lambda S, o: S.MultiplicativeLR(o, lambda e: 0.97)),
    ("multiplicative_list", "SGD", {}, lambda S, o: S.MultiplicativeLR(o, [_lambda, Warmup()])),
    ("polynomial", "SGD", {}, lambda S, o: S.PolynomialLR(o, total_iters=30, power=2.0)),
    ("polynomial_linear", "SGD", {}, lambda S, o: S.PolynomialLR(o, total_iters=7)),
    (
        "chained",
        "SGD",
        {},
        lambda S, o: S.ChainedScheduler(
            [S.ConstantLR(o, factor=0.1, total_iters=4), S.ExponentialLR(o, gamma=0.9)]
        ),
    ),
    (
        "chained_optimizer_kw",
        "SGD",
        {},
        lambda S, o: S.ChainedScheduler(
            [S.LinearLR(o, start_factor=0.3, total_iters=6), S.StepLR(o, 5, 0.5)], optimizer=o
        ),
    ),
    (
        "cyclic_triangular",
        "SGD",
        {"momentum": 0.9},
        lambda S, o: S.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=5),
    ),
    (
        "cyclic_triangular2_asym",
        "SGD",
        {"momentum": 0.9},
        lambda S, o: S.CyclicLR(
            o, 0.001, 0.1, step_size_up=3, step_size_down=7, mode="triangular2"
        ),
    ),
    (
        "cyclic_exp_range_adam",
        "Adam",
        {},
        lambda S, o: S.CyclicLR(o, 0.001, 0.01, step_size_up=4, mode="exp_range", gamma=0.97),
    ),
    (
        "cyclic_custom_no_momentum",
        "Adagrad",
        {},
        lambda S, o: S.CyclicLR(
            o, 0.01, 0.1, 6, scale_fn=Scale(), scale_mode="iterations", cycle_momentum=False
        ),
    ),
    ("warm_restarts", "SGD", {}, lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=7)),
    (
        "warm_restarts_mult",
        "SGD",
        {},
        lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.001),
    ),
]


def _run(lib, opt_name, okw, make, steps=STEPS):
    opt = _opt(lib, opt_name, **okw)
    sched = make(lib.optim.lr_scheduler, opt)
    seq = [(list(sched.get_last_lr()), _groups_view(opt.param_groups))]
    for _ in range(steps):
        opt.step()
        sched.step()
        seq.append((list(sched.get_last_lr()), _groups_view(opt.param_groups)))
    return seq, sched, opt


@pytest.mark.parametrize("name,opt,okw,make", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name, opt, okw, make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither warns in the normal order of calls
        ts, tsched, _ = _run(torch, opt, okw, make)
        as_, asched, _ = _run(ad, opt, okw, make)
    assert len(as_) == len(ts) == STEPS + 1
    for i, ((alr, ag), (tlr, tg)) in enumerate(zip(as_, ts, strict=True)):
        assert alr == tlr, f"step {i}: {alr} vs {tlr}"  # exact: same float formulas
        assert ag == tg, f"step {i}"
    assert sorted(asched.state_dict()) == sorted(tsched.state_dict())


def _plain(v):
    """A state_dict value comparable across the engines (nested scheduler dicts included)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    return v


@pytest.mark.parametrize("name,opt,okw,make", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_state_dict_round_trip_resumes_torch_sequence(name, opt, okw, make):
    """Run 17 steps, save scheduler and optimizer, load both into fresh ones, run on: the
    resumed sequence is the uninterrupted torch one; the state_dicts' plain values agree."""
    ref, _, _ = _run(torch, opt, okw, make, steps=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, sched, o = _run(ad, opt, okw, make, steps=17)
        sd, osd = sched.state_dict(), o.state_dict()
        saved = dict(sd)  # CyclicLR's load_state_dict pops a key, as PyTorch's does
        o2 = _opt(ad, opt, **okw)
        sched2 = make(ad.optim.lr_scheduler, o2)
        o2.load_state_dict(osd)
        sched2.load_state_dict(sd)
        seq = []
        for _ in range(13):
            o2.step()
            sched2.step()
            seq.append((list(sched2.get_last_lr()), _groups_view(o2.param_groups)))
    assert first + seq == ref
    _, tsched, _ = _run(torch, opt, okw, make, steps=17)
    tsd = tsched.state_dict()
    skip = {"_scale_fn_custom", "_schedulers", "lr_lambdas"}
    for k in tsd:
        if k not in skip and not callable(tsd[k]):
            assert _plain(saved[k]) == _plain(tsd[k]), k
    for k in ("_scale_fn_custom", "lr_lambdas"):
        if k in tsd:
            assert saved[k] == tsd[k]


@pytest.mark.parametrize("epochs", [[3, 10, 10.5, 0.25, 17, 4], [0, 1, 2, 50.0, 6]])
@pytest.mark.parametrize("T_mult", [1, 2, 3])
def test_warm_restarts_fractional_and_jumping_epochs_match_torch(epochs, T_mult):
    out = []
    for lib in (torch, ad):
        opt = _opt(lib)
        s = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=4, T_mult=T_mult)
        seq = []
        for e in epochs:
            opt.step()
            s.step(e)
            seq.append((s.get_last_lr(), s.T_cur, s.T_i, s.last_epoch))
            s.step()
            seq.append((s.get_last_lr(), s.T_cur, s.T_i, s.last_epoch))
        out.append(seq)
    assert out[1] == out[0]


def test_multiplicative_step_with_epoch_matches_torch():
    out = []
    for lib in (torch, ad):
        opt = _opt(lib)
        s = lib.optim.lr_scheduler.MultiplicativeLR(opt, lambda e: 1.0 / (e + 1))
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s.step(3)
        out.append(s.get_last_lr())
    assert out[1] == out[0]


def test_not_subclasses_torch_does_not_have():
    S = ad.optim.lr_scheduler
    assert not issubclass(S.MultiplicativeLR, S.LambdaLR)
    assert issubclass(S.ChainedScheduler, S.LRScheduler)


SCHED_ERRORS = [
    ("mult_not_callable", lambda lib: lib.optim.lr_scheduler.MultiplicativeLR(_opt(lib), 0.5)),
    (
        "mult_count",
        lambda lib: lib.optim.lr_scheduler.MultiplicativeLR(_opt(lib), [_lambda]),
    ),
    ("chained_empty", lambda lib: lib.optim.lr_scheduler.ChainedScheduler([])),
    (
        "chained_plateau",
        lambda lib: (
            lambda o: lib.optim.lr_scheduler.ChainedScheduler(
                [lib.optim.lr_scheduler.ReduceLROnPlateau(o)]
            )
        )(_opt(lib)),
    ),
    (
        "chained_two_optimizers",
        lambda lib: lib.optim.lr_scheduler.ChainedScheduler(
            [
                lib.optim.lr_scheduler.StepLR(_opt(lib), 2),
                lib.optim.lr_scheduler.StepLR(_opt(lib), 2),
            ]
        ),
    ),
    ("cyclic_mode", lambda lib: lib.optim.lr_scheduler.CyclicLR(_opt(lib), 0.1, 1.0, mode="x")),
    (
        "cyclic_no_momentum",
        lambda lib: lib.optim.lr_scheduler.CyclicLR(_opt(lib, "Adagrad"), 0.1, 1.0),
    ),
    ("cyclic_max_lr_count", lambda lib: lib.optim.lr_scheduler.CyclicLR(_opt(lib), 0.1, [1.0])),
    ("cyclic_not_optimizer", lambda lib: lib.optim.lr_scheduler.CyclicLR(object(), 0.1, 1.0)),
    (
        "warm_T0",
        lambda lib: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_opt(lib), T_0=0),
    ),
    (
        "warm_T_mult",
        lambda lib: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_opt(lib), 2, T_mult=1.5),
    ),
    (
        "warm_eta_min",
        lambda lib: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_opt(lib), 2, eta_min="0"),
    ),
    (
        "warm_negative_epoch",
        lambda lib: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(_opt(lib), 2).step(-1),
    ),
]


@pytest.mark.parametrize("fn", [c[1] for c in SCHED_ERRORS], ids=[c[0] for c in SCHED_ERRORS])
def test_scheduler_errors_match_torch(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ea, et = same_error(fn, torch)
    assert str(ea) == str(et)
