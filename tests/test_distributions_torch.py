"""Differential tests of ``torch.distributions`` (``autodiag.distributions``): Normal,
Categorical, Bernoulli, Uniform and kl_divergence.

Everything that is a function of the parameters and a given value (log_prob, entropy, cdf,
icdf, moments, KL, their gradients and graph nodes, shapes, validation errors) is compared with
PyTorch exactly. Samples come from autodiag's own random stream, which is not PyTorch's (NOTE
[Sampling streams]): they are tested statistically, and ``rsample``'s gradients against the
reparameterisation formula.
"""

from __future__ import annotations

import numpy as np
import pytest
from differential import run_both, same_error

import autodiag as ad
from autodiag.distributions import Bernoulli, Categorical, Normal, Uniform, kl_divergence

torch = pytest.importorskip("torch")


def D(m):
    return m.distributions


def leaf(m, values):
    return m.tensor(values, dtype=m.float64, requires_grad=True)


def value_and_grads(fn):
    """fn(m) -> (result tensor, [leaves]): the result and d(result.sum())/d(leaves)."""

    def run(m):
        out, leaves = fn(m)
        grads = m.autograd.grad(out.sum(), leaves, allow_unused=True)
        return out, tuple(g if g is not None else m.zeros(()) for g in grads)

    return run


def node_names(t):
    """The grad_fn name and its next_functions' names (AccumulateGrad printed alike)."""
    fn = t.grad_fn
    if fn is None:  # the parameter itself (Categorical(probs=p).probs is p)
        return None, t.requires_grad
    names = []
    for n, _ in fn.next_functions:
        names.append(None if n is None else type(n).__name__)
    return type(fn).__name__, names


def same_nodes(fn):
    a, _ = fn(ad)
    t, _ = fn(torch)
    assert node_names(a) == node_names(t)


# ---------------------------------------------------------------------------------------------
# Normal
# ---------------------------------------------------------------------------------------------

NORMAL_CASES = {
    "log_prob": lambda m, d: d.log_prob(m.tensor([0.3, -1.0, 2.5], dtype=m.float64)),
    "log_prob_broadcast": lambda m, d: d.log_prob(m.tensor([[0.3], [-1.0]], dtype=m.float64)),
    "entropy": lambda m, d: d.entropy(),
    "cdf": lambda m, d: d.cdf(m.tensor([0.3, -1.0, 2.5], dtype=m.float64)),
    "icdf": lambda m, d: d.icdf(m.tensor([0.3, 0.01, 0.999], dtype=m.float64)),
    "mean": lambda m, d: d.mean * 1,
    "stddev": lambda m, d: d.stddev * 1,
    "variance": lambda m, d: d.variance,
    "mode": lambda m, d: d.mode * 1,
}


@pytest.mark.parametrize("case", sorted(NORMAL_CASES))
def test_normal_matches_torch(case):
    def fn(m):
        loc, scale = leaf(m, [0.5, -1.0, 2.0]), leaf(m, [1.0, 0.5, 3.0])
        return NORMAL_CASES[case](m, D(m).Normal(loc, scale)), [loc, scale]

    run_both(value_and_grads(fn), torch)
    same_nodes(fn)


def test_normal_shapes_scalars_and_repr():
    def fn(m):
        d = D(m).Normal(m.zeros(2, 3), 1.0)
        s = D(m).Normal(0.0, 1.0)
        return (
            tuple(d.batch_shape),
            tuple(d.event_shape),
            tuple(d.sample((4,)).shape),
            tuple(d.rsample().shape),
            tuple(s.batch_shape),
            tuple(s.sample((2, 5)).shape),
            repr(d),
            repr(s),
            repr(D(m).Normal(0.0, 1.0).expand((3,))),
            str(s.sample().dtype).split(".")[-1],
            s.sample().requires_grad,
            D(m).Normal.has_rsample,
        )

    assert fn(ad) == fn(torch)


def test_normal_rsample_is_reparameterised():
    loc, scale = leaf(ad, [0.5, -1.0]), leaf(ad, [1.0, 2.0])
    ad.manual_seed(3)
    x = Normal(loc, scale).rsample((1000,))
    assert type(x.grad_fn).__name__ == "AddBackward0"
    x.sum().backward()
    eps = (x.detach() - loc.detach()) / scale.detach()
    np.testing.assert_allclose(loc.grad.numpy(), [1000.0, 1000.0])
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0).numpy(), rtol=1e-10)
    # the sample itself has the distribution's moments
    assert abs(eps.mean().item()) < 0.1 and abs(eps.std().item() - 1) < 0.1


def test_normal_samples_statistically_and_seeded():
    ad.manual_seed(0)
    a = Normal(ad.tensor([2.0, -3.0]), ad.tensor([0.5, 4.0])).sample((20000,))
    np.testing.assert_allclose(a.mean(0).numpy(), [2.0, -3.0], atol=0.1)
    np.testing.assert_allclose(a.std(0).numpy(), [0.5, 4.0], rtol=0.05)
    ad.manual_seed(0)
    b = Normal(ad.tensor([2.0, -3.0]), ad.tensor([0.5, 4.0])).sample((20000,))
    assert (a == b).all()  # reproducible under manual_seed (not PyTorch's numbers)


# ---------------------------------------------------------------------------------------------
# Categorical
# ---------------------------------------------------------------------------------------------

CATEGORICAL_CASES = {
    "log_prob": lambda m, d: d.log_prob(m.tensor([2, 0])),
    "log_prob_broadcast": lambda m, d: d.log_prob(m.tensor([[1], [0], [2]])),
    "entropy": lambda m, d: d.entropy(),
    "probs": lambda m, d: d.probs,
    "logits": lambda m, d: d.logits,
}


@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("case", sorted(CATEGORICAL_CASES))
def test_categorical_matches_torch(case, param):
    def fn(m):
        p = leaf(m, [[1.0, 2.0, 3.0], [0.5, 0.25, 4.0]])
        return CATEGORICAL_CASES[case](m, D(m).Categorical(**{param: p})), [p]

    run_both(value_and_grads(fn), torch)
    same_nodes(fn)


def test_categorical_shapes_support_and_moments():
    def fn(m):
        d = D(m).Categorical(logits=m.zeros(4, 3))
        return (
            tuple(d.batch_shape),
            tuple(d.event_shape),
            tuple(d.sample((2,)).shape),
            str(d.sample().dtype).split(".")[-1],
            tuple(d.param_shape),
            repr(d),
            repr(d.support),
            d.enumerate_support().tolist(),
            d.enumerate_support(expand=False).tolist(),
            np.isnan(d.mean.numpy()).all(),
            d.mode.tolist(),
            repr(D(m).Categorical(probs=m.tensor([0.2, 0.8])).expand((2,))),
        )

    assert fn(ad) == fn(torch)


def test_categorical_entropy_with_impossible_category():
    run_both(
        lambda m: D(m).Categorical(logits=m.tensor([0.0, -float("inf"), 1.0])).entropy(), torch
    )


def test_categorical_samples_follow_the_probabilities():
    ad.manual_seed(1)
    probs = ad.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    s = Categorical(probs=probs).sample((40000,))
    assert s.shape == (40000, 2) and s.dtype == ad.int64
    freq = np.stack([np.bincount(s.numpy()[:, i], minlength=4) / 40000 for i in range(2)])
    np.testing.assert_allclose(freq, probs.numpy(), atol=0.015)
    assert freq[0, 1] == 0.0  # an impossible category is never drawn


# ---------------------------------------------------------------------------------------------
# Bernoulli, Uniform
# ---------------------------------------------------------------------------------------------

BERNOULLI_CASES = {
    "log_prob": lambda m, d: d.log_prob(m.tensor([1.0, 0.0, 1.0], dtype=m.float64)),
    "entropy": lambda m, d: d.entropy(),
    "probs": lambda m, d: d.probs,
    "logits": lambda m, d: d.logits,
    "mean": lambda m, d: d.mean * 1,
    "variance": lambda m, d: d.variance,
}


@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("case", sorted(BERNOULLI_CASES))
def test_bernoulli_matches_torch(case, param):
    values = [0.2, 0.7, 0.5] if param == "probs" else [-1.5, 0.25, 2.0]

    def fn(m):
        p = leaf(m, values)
        return BERNOULLI_CASES[case](m, D(m).Bernoulli(**{param: p})), [p]

    run_both(value_and_grads(fn), torch)
    same_nodes(fn)


def test_bernoulli_mode_shapes_and_samples():
    run_both(lambda m: D(m).Bernoulli(probs=m.tensor([0.2, 0.5, 0.9])).mode, torch)
    run_both(lambda m: D(m).Bernoulli(0.3).enumerate_support(), torch)

    def shapes(m):
        d = D(m).Bernoulli(probs=m.tensor([0.2, 0.7]))
        return tuple(d.batch_shape), tuple(d.sample((3,)).shape), repr(d), repr(d.support)

    assert shapes(ad) == shapes(torch)
    ad.manual_seed(2)
    s = Bernoulli(probs=ad.tensor([0.2, 0.7])).sample((20000,))
    assert set(np.unique(s.numpy())) <= {0.0, 1.0}
    np.testing.assert_allclose(s.mean(0).numpy(), [0.2, 0.7], atol=0.015)


UNIFORM_CASES = {
    "log_prob": lambda m, d: d.log_prob(m.tensor([0.3, 1.5], dtype=m.float64)),
    "entropy": lambda m, d: d.entropy(),
    "cdf": lambda m, d: d.cdf(m.tensor([0.3, 1.5], dtype=m.float64)),
    "icdf": lambda m, d: d.icdf(m.tensor([0.3, 0.9], dtype=m.float64)),
    "mean": lambda m, d: d.mean,
    "stddev": lambda m, d: d.stddev,
    "variance": lambda m, d: d.variance,
}


@pytest.mark.parametrize("case", sorted(UNIFORM_CASES))
def test_uniform_matches_torch(case):
    def fn(m):
        low, high = leaf(m, [0.0, 1.0]), leaf(m, [1.0, 3.0])
        return UNIFORM_CASES[case](m, D(m).Uniform(low, high)), [low, high]

    run_both(value_and_grads(fn), torch)
    same_nodes(fn)


def test_uniform_outside_the_support_without_validation():
    run_both(
        lambda m: D(m).Uniform(0.0, 2.0, validate_args=False).log_prob(m.tensor([1.0, 3.0])),
        torch,
    )


def test_uniform_rsample_statistics_and_gradient():
    low, high = leaf(ad, [0.0, -2.0]), leaf(ad, [1.0, 2.0])
    ad.manual_seed(4)
    x = Uniform(low, high).rsample((20000,))
    assert (x >= low).all() and (x < high).all()
    np.testing.assert_allclose(x.mean(0).detach().numpy(), [0.5, 0.0], atol=0.03)
    x.sum().backward()
    u = (x.detach() - low.detach()) / (high.detach() - low.detach())
    np.testing.assert_allclose(high.grad.numpy(), u.sum(0).numpy(), rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# KL divergence
# ---------------------------------------------------------------------------------------------

KL_CASES = {
    "normal": lambda m, a, b: (D(m).Normal(a, b.exp()), D(m).Normal(b, a.exp())),
    "categorical": lambda m, a, b: (
        D(m).Categorical(logits=a),
        D(m).Categorical(logits=b),
    ),
    "bernoulli": lambda m, a, b: (D(m).Bernoulli(logits=a), D(m).Bernoulli(logits=b)),
    "uniform": lambda m, a, b: (
        D(m).Uniform(a, a + b.exp()),
        D(m).Uniform(a - 1, a + b.exp() + 1),
    ),
    "uniform_normal": lambda m, a, b: (D(m).Uniform(a, a + b.exp()), D(m).Normal(b, a.exp())),
}


@pytest.mark.parametrize("case", sorted(KL_CASES))
def test_kl_divergence_matches_torch(case):
    def fn(m):
        a, b = leaf(m, [0.5, -1.0, 0.25]), leaf(m, [-0.5, 0.3, 1.0])
        p, q = KL_CASES[case](m, a, b)
        return D(m).kl_divergence(p, q), [a, b]

    run_both(value_and_grads(fn), torch)


def test_kl_divergence_infinite_and_missing_pairs():
    run_both(
        lambda m: D(m).kl_divergence(
            D(m).Categorical(probs=m.tensor([0.5, 0.5])),
            D(m).Categorical(probs=m.tensor([1.0, 0.0])),
        ),
        torch,
    )
    run_both(
        lambda m: D(m).kl_divergence(D(m).Uniform(0.0, 2.0), D(m).Uniform(0.5, 1.0)),
        torch,
    )
    same_error(
        lambda m: D(m).kl_divergence(
            D(m).Normal(0.0, 1.0), D(m).Categorical(probs=m.tensor([0.5, 0.5]))
        ),
        torch,
        "No KL(p || q) is implemented for p type Normal and q type Categorical",
    )


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,phrase",
    [
        (
            lambda m: D(m).Normal(0.0, -1.0),
            "Expected parameter scale (Tensor of shape ()) of distribution Normal(loc: 0.0, "
            "scale: -1.0) to satisfy the constraint GreaterThan(lower_bound=0.0), but found "
            "invalid values:\n-1.0",
        ),
        (
            lambda m: D(m).Normal(m.zeros(2), m.tensor([1.0, -1.0])),
            "of distribution Normal(loc: torch.Size([2]), scale: torch.Size([2])) to satisfy",
        ),
        (lambda m: D(m).Normal(float("nan"), 1.0), "to satisfy the constraint Real()"),
        (
            lambda m: D(m).Normal(0.0, 1.0).log_prob(0.5),
            "The value argument to log_prob must be a Tensor",
        ),
        (
            lambda m: D(m).Normal(m.zeros(3), 1.0).log_prob(m.zeros(2)),
            "Value is not broadcastable with batch_shape+event_shape",
        ),
        (
            lambda m: D(m).Categorical(probs=m.ones(3), logits=m.ones(3)),
            "Either `probs` or `logits` must be specified, but not both.",
        ),
        (lambda m: D(m).Categorical(), "Either `probs` or `logits` must be specified"),
        (
            lambda m: D(m).Categorical(probs=m.tensor(1.0)),
            "`probs` parameter must be at least one-dimensional.",
        ),
        (
            lambda m: D(m).Categorical(probs=m.tensor([0.5, -0.5])),
            "to satisfy the constraint Simplex()",
        ),
        (
            lambda m: D(m).Categorical(logits=m.zeros(3)).log_prob(m.tensor(3)),
            "Expected value argument (Tensor of shape ()) to be within the support "
            "(IntegerInterval(lower_bound=0, upper_bound=2)) of the distribution "
            "Categorical(logits: torch.Size([3])), but found invalid values:\n3",
        ),
        (
            lambda m: D(m).Bernoulli(probs=m.tensor([1.2])),
            "to satisfy the constraint Interval(lower_bound=0.0, upper_bound=1.0)",
        ),
        (
            lambda m: D(m).Bernoulli(probs=m.tensor([0.2])).log_prob(m.tensor([0.5])),
            "to be within the support (Boolean())",
        ),
        (
            lambda m: D(m).Uniform(2.0, 0.0),
            "Expected parameter low (Tensor of shape ()) of distribution Uniform(low: 2.0, "
            "high: 0.0) to satisfy the constraint LessThan(upper_bound=0.0)",
        ),
        (
            lambda m: D(m).Uniform(0.0, 2.0).log_prob(m.tensor([1.0, 3.0])),
            "(Interval(lower_bound=0.0, upper_bound=2.0))",
        ),
        (
            lambda m: D(m).Normal("a", 1.0),
            "Input arguments must all be instances of Number, torch.Tensor",
        ),
    ],
)
def test_validation_errors_as_torch(case, phrase):
    same_error(case, torch, phrase)


def test_validation_can_be_turned_off():
    def fn(m):
        d = D(m).Normal(0.0, -1.0, validate_args=False)
        return repr(d), d.log_prob(m.tensor(0.5)).item()

    a, t = fn(ad), fn(torch)
    assert a[0] == t[0] and np.isnan(a[1]) == np.isnan(t[1])


# ---------------------------------------------------------------------------------------------
# Under `import torch` (the alias) and under vmap
# ---------------------------------------------------------------------------------------------


def test_distributions_resolve_under_the_alias():
    from autodiag.torch_alias import torch_alias

    with torch_alias():
        import torch as t  # noqa: F811 - the alias
        import torch.distributions as dist
        from torch.distributions import Categorical as C
        from torch.distributions.normal import Normal as N

        assert dist.Categorical is C is Categorical and N is Normal
        assert t.distributions.kl_divergence is kl_divergence
        assert t.func.grad is ad.func.grad


def test_sampling_inside_vmap_follows_randomness():
    with pytest.raises(RuntimeError, match="randomness error mode"):
        ad.func.vmap(lambda p: Categorical(probs=p).sample())(ad.ones(3, 2))
    out = ad.func.vmap(lambda p: Categorical(probs=p).sample(), randomness="different")(
        ad.ones(3, 2)
    )
    assert out.shape == (3,)
