"""Differential tests of ``autodiag.optim.lr_scheduler`` against ``torch.optim.lr_scheduler``:
the learning rates (and momenta) of every param group over 40 steps are PyTorch's exactly."""

from __future__ import annotations

import warnings

import pytest
from differential import same_error

import autodiag as ad

torch = pytest.importorskip("torch")


def _opt(lib, opt="SGD", **kw):
    a = lib.nn.Parameter(lib.ones(2))
    b = lib.nn.Parameter(lib.ones(3))
    groups = [{"params": [a]}, {"params": [b], "lr": 0.03}]
    return getattr(lib.optim, opt)(groups, lr=0.1, **kw)


def _lambda(e):
    return 0.95**e


class Warmup:
    """A callable object: LambdaLR saves its __dict__ in state_dict."""

    def __init__(self):
        self.n = 3

    def __call__(self, e):
        return min(1.0, (e + 1) / self.n)


SCHEDULES = [
    ("step", "SGD", {}, lambda S, o: S.StepLR(o, step_size=7, gamma=0.5)),
    ("multistep", "SGD", {}, lambda S, o: S.MultiStepLR(o, milestones=[3, 10, 10, 25], gamma=0.3)),
    ("exponential", "SGD", {}, lambda S, o: S.ExponentialLR(o, gamma=0.9)),
    ("cosine", "SGD", {}, lambda S, o: S.CosineAnnealingLR(o, T_max=12, eta_min=0.001)),
    ("lambda", "SGD", {}, lambda S, o: S.LambdaLR(o, _lambda)),
    ("lambda_list", "SGD", {}, lambda S, o: S.LambdaLR(o, [_lambda, Warmup()])),
    ("constant", "SGD", {}, lambda S, o: S.ConstantLR(o, factor=0.25, total_iters=6)),
    ("linear", "SGD", {}, lambda S, o: S.LinearLR(o, start_factor=0.2, total_iters=9)),
    (
        "onecycle_sgd",
        "SGD",
        {"momentum": 0.9},
        lambda S, o: S.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=41),
    ),
    (
        "onecycle_adam_linear_3phase",
        "Adam",
        {},
        lambda S, o: S.OneCycleLR(
            o, max_lr=0.1, epochs=5, steps_per_epoch=9, anneal_strategy="linear", three_phase=True
        ),
    ),
    (
        "sequential",
        "SGD",
        {},
        lambda S, o: S.SequentialLR(
            o,
            [S.LinearLR(o, start_factor=0.1, total_iters=5), S.CosineAnnealingLR(o, T_max=20)],
            milestones=[5],
        ),
    ),
]


def _run(lib, opt_name, okw, make, steps=40):
    opt = _opt(lib, opt_name, **okw)
    sched = make(lib.optim.lr_scheduler, opt)
    seq = [(sched.get_last_lr(), [dict(g) for g in opt.param_groups])]
    for _ in range(steps):
        opt.step()
        sched.step()
        seq.append((list(sched.get_last_lr()), [dict(g) for g in opt.param_groups]))
    return seq, sched


def _groups_view(groups):
    return [{k: v for k, v in g.items() if k != "params"} for g in groups]


@pytest.mark.parametrize("name,opt,okw,make", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name, opt, okw, make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither warns in the normal order of calls
        ts, tsched = _run(torch, opt, okw, make)
        as_, asched = _run(ad, opt, okw, make)
    assert len(as_) == len(ts) == 41
    for i, ((alr, ag), (tlr, tg)) in enumerate(zip(as_, ts)):
        assert alr == tlr, f"step {i}: {alr} vs {tlr}"  # exact: same float formulas
        assert _groups_view(ag) == _groups_view(tg), f"step {i}"
    tsd, asd = tsched.state_dict(), asched.state_dict()
    assert sorted(asd) == sorted(tsd)


def test_reduce_lr_on_plateau_matches_torch():
    metrics = [5, 4, 4, 4, 4, 3.9999, 3.99, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2] * 2
    for kw in (
        dict(patience=2),
        dict(mode="max", factor=0.5, patience=1, threshold_mode="abs", cooldown=2),
        dict(patience=0, min_lr=[0.05, 0.0], threshold=0.1),
    ):
        seqs = []
        for lib in (torch, ad):
            opt = _opt(lib)
            sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
            seq = []
            for m in metrics:
                opt.step()
                sched.step(m)
                seq.append((sched.get_last_lr(), sched.num_bad_epochs, sched.best))
            seqs.append(seq)
        assert seqs[1] == seqs[0], kw


def test_epoch_argument_uses_closed_form_and_warns():
    out = []
    for lib in (torch, ad):
        opt = _opt(lib)
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        opt.step()
        with pytest.warns(UserWarning, match="epoch parameter"):
            sched.step(7)
        out.append(sched.get_last_lr())
    assert out[1] == out[0] == [0.025, 0.0075]


def test_step_order_warning_and_get_lr_warning():
    for lib in (torch, ad):
        opt = _opt(lib)
        sched = lib.optim.lr_scheduler.ExponentialLR(opt, 0.5)
        with pytest.warns(UserWarning, match=r"before `optimizer.step\(\)`"):
            sched.step()
        with pytest.warns(UserWarning, match="get_last_lr"):
            sched.get_lr()


def test_state_dict_round_trip():
    opt = _opt(ad)
    sched = ad.optim.lr_scheduler.LambdaLR(opt, [_lambda, Warmup()])
    for _ in range(4):
        opt.step()
        sched.step()
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [None, {"n": 3}] and sd["last_epoch"] == 4
    opt2 = _opt(ad)
    w = Warmup()
    w.n = 99
    sched2 = ad.optim.lr_scheduler.LambdaLR(opt2, [_lambda, w])
    sched2.load_state_dict(sd)
    assert w.n == 3 and sched2.last_epoch == 4


SCHED_ERRORS = [
    ("not_optimizer", lambda lib: lib.optim.lr_scheduler.StepLR(object(), 3)),
    (
        "resume_without_initial_lr",
        lambda lib: lib.optim.lr_scheduler.StepLR(_opt(lib), 3, last_epoch=4),
    ),
    ("lambda_count", lambda lib: lib.optim.lr_scheduler.LambdaLR(_opt(lib), [_lambda])),
    ("linear_start", lambda lib: lib.optim.lr_scheduler.LinearLR(_opt(lib), start_factor=0)),
    ("plateau_factor", lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(_opt(lib), factor=1.0)),
    ("plateau_mode", lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(_opt(lib), mode="up")),
    ("onecycle_steps", lambda lib: lib.optim.lr_scheduler.OneCycleLR(_opt(lib), 0.1)),
    (
        "onecycle_no_momentum",
        lambda lib: lib.optim.lr_scheduler.OneCycleLR(_opt(lib, "Adagrad"), 0.1, total_steps=5),
    ),
    (
        "onecycle_past_end",
        lambda lib: [
            s.step()
            for s in [lib.optim.lr_scheduler.OneCycleLR(_opt(lib), 0.1, total_steps=2)]
            for _ in range(3)
        ],
    ),
    (
        "sequential_milestones",
        lambda lib: (
            lambda o: lib.optim.lr_scheduler.SequentialLR(
                o, [lib.optim.lr_scheduler.StepLR(o, 2)], milestones=[3]
            )
        )(_opt(lib)),
    ),
]


@pytest.mark.parametrize("fn", [c[1] for c in SCHED_ERRORS], ids=[c[0] for c in SCHED_ERRORS])
def test_scheduler_errors_match_torch(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ea, et = same_error(fn, torch)
    assert str(ea) == str(et)
