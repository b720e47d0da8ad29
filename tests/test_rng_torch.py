"""PyTorch's random stream, bit for bit: after the same seed autodiag and torch 2.13 draw the
same numbers (``manual_seed``, ``Generator``, the random factories, the in-place fills,
``bernoulli``, ``multinomial``, dropout, ``nn.init`` and the modules' initialisation, the data
utilities, the distributions' samples) and leave the stream at the same place (the state bytes
of ``get_rng_state()`` are compared after every program).

Every program takes the namespace (``torch`` or ``autodiag``) and returns a list of tensors;
``_same`` runs it on both after ``manual_seed(seed)`` and compares values, dtypes and the
final stream state exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from differential import same_error

import autodiag as ad

torch = pytest.importorskip("torch")

SEEDS = [0, 1, 12345, -7, 2**40 + 3]
DTYPES = ["float32", "float64"]


def _arrays(out) -> list:
    if not isinstance(out, (list, tuple)):
        out = [out]
    return [o.detach().numpy() if hasattr(o, "detach") else np.asarray(o) for o in out]


def _same(program, seed=0):
    torch.manual_seed(seed)
    expected = _arrays(program(torch))
    t_state = torch.get_rng_state().numpy()
    ad.manual_seed(seed)
    got = _arrays(program(ad))
    a_state = ad.get_rng_state().numpy()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype, f"draw {i}: dtype {g.dtype}, torch {e.dtype}"
        assert g.shape == e.shape, f"draw {i}: shape {g.shape}, torch {e.shape}"
        bad = np.flatnonzero(g.ravel() != e.ravel())
        assert not bad.size, (
            f"draw {i}: {bad.size} of {g.size} differ, first at {bad[0]}: "
            f"{g.ravel()[bad[0]]!r} vs torch {e.ravel()[bad[0]]!r}"
        )
    assert np.array_equal(a_state, t_state), "the stream ends elsewhere than torch's"


# --- seeding and state ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS + [2**64 - 1, -(2**63)])
def test_manual_seed_gives_torchs_state_bytes_and_initial_seed(seed):
    t, a = torch.manual_seed(seed), ad.manual_seed(seed)
    assert a.initial_seed() == t.initial_seed() == ad.initial_seed() == torch.initial_seed()
    assert np.array_equal(ad.get_rng_state().numpy(), torch.get_rng_state().numpy())
    assert ad.get_rng_state().dtype is ad.uint8 and tuple(ad.get_rng_state().shape) == (5056,)


def test_a_fresh_generator_is_torchs():
    assert ad.Generator().initial_seed() == torch.Generator().initial_seed()
    assert np.array_equal(ad.Generator().get_state().numpy(), torch.Generator().get_state().numpy())
    _same(lambda m: m.rand(5, generator=m.Generator()))


@pytest.mark.parametrize("seed", SEEDS)
def test_consecutive_draws_keep_torchs_stream_position(seed):
    def program(m):
        return [
            m.rand(3),
            m.randn(5),
            m.rand(2),
            m.randn(37),
            m.randn(3, dtype=m.float64),
            m.randn(16),
            m.randn(1),
            m.rand(4, dtype=m.float64),
            m.randint(0, 7, (3,)),
            m.randn(2, 2),
        ]

    _same(program, seed)


def test_state_round_trips_and_crosses_between_torch_and_autodiag():
    # randn(3) leaves the second normal of a pair cached in the state: it travels too
    torch.manual_seed(5)
    torch.randn(3)
    state = torch.get_rng_state()
    expected = torch.randn(4).numpy()
    ad.set_rng_state(ad.from_numpy(state.numpy().copy()))
    assert np.array_equal(ad.randn(4).numpy(), expected)

    ad.manual_seed(9)
    ad.rand(700)  # past one 624-word block
    ad.randn(5)
    torch.set_rng_state(torch.from_numpy(ad.get_rng_state().numpy().copy()))
    assert np.array_equal(torch.randn(7).numpy(), ad.randn(7).numpy())

    g = ad.Generator().manual_seed(3)
    st = g.get_state()
    first = ad.rand(6, generator=g)
    g.set_state(st)
    assert np.array_equal(ad.rand(6, generator=g).numpy(), first.numpy())


def test_state_errors_are_torchs():
    same_error(lambda m: m.set_rng_state(m.zeros(10, dtype=m.uint8)), torch, "of size 5056")
    same_error(lambda m: m.set_rng_state(m.zeros(5056, dtype=m.int64)), torch, "ByteTensor")
    same_error(lambda m: m.set_rng_state(m.zeros(5056, dtype=m.uint8)), torch, "Invalid mt19937")
    same_error(lambda m: m.manual_seed(2**64), torch, "Overflow")


def test_seed_and_fork_rng():
    s = ad.seed()
    assert ad.initial_seed() == s
    _same(lambda m: m.rand(3), seed=s)

    def program(m):
        before = m.rand(2)
        with m.random.fork_rng():
            m.randn(40)
        return [before, m.rand(2)]

    _same(program, 4)


# --- factories -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 1001])
def test_rand_and_randn_of_every_size(dtype, n):
    _same(lambda m: [m.rand(n, dtype=getattr(m, dtype)), m.randn(n, dtype=getattr(m, dtype))], 3)


@pytest.mark.parametrize("seed", [0, 2])
def test_randn_float32_block_path_over_a_million_values(seed):
    # the AVX2 Box-Muller (cephes log/sincos with FMAs) over many values, and a ragged tail
    _same(lambda m: m.randn(1_000_003), seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_fills(dtype):
    def program(m):
        dt = getattr(m, dtype)
        return [
            m.empty(40, dtype=dt).uniform_(-2.5, 3.25),
            m.empty(5, dtype=dt).uniform_(),
            m.empty(41, dtype=dt).normal_(1.5, 0.3),
            m.empty(7, dtype=dt).normal_(-1.0, 2.0),
            m.empty(3, 12, dtype=dt).t().normal_(),  # not contiguous: the element-wise path
            m.empty(6, 5, dtype=dt).t().uniform_(0, 4),  # filled in memory order
            m.empty(9, dtype=dt).exponential_(2.0),
            m.empty(20, dtype=dt).exponential_(),
            m.empty(6, dtype=dt).random_(),
            m.empty(6, dtype=dt).random_(10),
            m.empty(6, dtype=dt).random_(-5, 5),
        ]

    _same(program, 11)


def test_integers():
    def program(m):
        return [
            m.randint(3, 1000, (20,)),
            m.randint(10, (4, 2)),
            m.randint(-(2**40), 2**40, (5,)),  # a range past 2**32: 64-bit draws
            m.randint(0, 2**40, (3,), dtype=m.float64),
            m.randint(0, 5, (4,), dtype=m.int32),
            m.randint(0, 3, (5,), dtype=m.float32),
            m.randint_like(m.zeros(2, 3), 9),
            m.randint_like(m.zeros(3, dtype=m.int32), 2, 9),
            m.empty(5, dtype=m.int64).random_(),
            m.empty(5, dtype=m.int32).random_(),
            m.empty(5, dtype=m.uint8).random_(),
            m.empty(5, dtype=m.bool).random_(),
        ]

    _same(program, 21)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 1000, 100_000])
def test_randperm(n):
    _same(lambda m: [m.randperm(n), m.randperm(n, dtype=m.float32), m.rand(1)], n)


def test_normal_forms():
    def program(m):
        mean = m.tensor([[0.0, 1.0, -2.0], [3.0, 4.0, 5.0]])
        std = m.tensor([1.0, 0.5, 2.0])
        return [
            m.normal(2.0, 3.0, (20,)),
            m.normal(0.0, 1.0, size=(3,)),
            m.normal(mean, std),
            m.normal(mean, 0.5),
            m.normal(1.5, std),
            m.normal(mean.double(), std.double()),
        ]

    _same(program, 8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_like_factories(dtype):
    def program(m):
        x = m.zeros(4, 5, dtype=getattr(m, dtype))
        return [m.rand_like(x), m.randn_like(x), m.randn_like(x[:1])]

    _same(program, 6)


def test_generators_are_honoured_and_leave_the_global_stream_alone():
    def program(m):
        g = m.Generator().manual_seed(99)
        return [
            m.rand(3, generator=g),
            m.randn(20, generator=g),
            m.randint(0, 50, (4,), generator=g),
            m.randperm(9, generator=g),
            m.normal(0.0, 2.0, (3,), generator=g),
            m.empty(5).uniform_(-1, 1, generator=g),
            m.empty(5).normal_(generator=g),
            m.empty(5).exponential_(generator=g),
            m.bernoulli(m.full((6,), 0.5), generator=g),
            m.multinomial(m.tensor([0.2, 0.8]), 4, True, generator=g),
            g.get_state(),
            m.rand(3),  # the global stream: untouched by all of the above
        ]

    _same(program, 31)


# --- bernoulli, multinomial, dropout -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_bernoulli(dtype):
    def program(m):
        dt = getattr(m, dtype)
        p = m.linspace(0, 1, 21, dtype=dt).reshape(3, 7)
        return [
            m.bernoulli(p),
            m.bernoulli(p, 0.3),
            m.zeros(3, 7, dtype=m.float64).bernoulli_(p),
            m.zeros(7, 3, dtype=dt).t().bernoulli_(p),
            m.zeros(40, dtype=dt).bernoulli_(0.7),
            m.zeros(2, 7, dtype=dt).bernoulli_(p[:1]),  # p broadcast
            p.bernoulli(),
        ]

    _same(program, 13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "n,replacement", [(1, True), (1, False), (5, True), (4, False), (7, False), (100, True)]
)
def test_multinomial(dtype, n, replacement):
    def program(m):
        rows = m.tensor(np.random.default_rng(0).random((3, 7)), dtype=getattr(m, dtype))
        return [
            m.multinomial(rows, n, replacement),
            m.multinomial(rows[1], n, replacement),
            m.multinomial(m.tensor([0.0, 1.0, 1.0], dtype=getattr(m, dtype)), 1, replacement),
        ]

    _same(program, 17)


@pytest.mark.parametrize("p", [0.5, 0.1, 0.37])
def test_dropout(p):
    def program(m):
        x = m.tensor(np.random.default_rng(1).standard_normal((4, 5, 3, 3)), dtype=m.float32)
        drop = m.nn.Dropout(p)
        return [
            m.nn.functional.dropout(x, p),
            m.nn.functional.dropout(x.double(), p),
            drop(x[0]),
            m.nn.functional.dropout2d(x, p),
            m.nn.functional.dropout(x, p, training=False),
            m.rand(2),
        ]

    _same(program, 19)


# --- nn: init and modules ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,args",
    [
        ("uniform_", (-1, 2)),
        ("normal_", (0.5, 2.0)),
        ("xavier_uniform_", ()),
        ("xavier_normal_", (1.3,)),
        ("kaiming_uniform_", ()),
        ("kaiming_normal_", ()),
        ("trunc_normal_", ()),
        ("trunc_normal_", (0.0, 0.02)),
        ("trunc_normal_", (0.3, 1.0, 0.0, 0.1)),  # narrow bounds: the rejection sampler
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 4), (40, 30)])
def test_nn_init(name, args, dtype, shape):
    def program(m):
        w = m.empty(*shape, dtype=getattr(m, dtype))
        return [getattr(m.nn.init, name)(w, *args), m.rand(2)]

    _same(program, 1)


@pytest.mark.parametrize(
    "name,args",
    [
        ("Linear", (4, 3)),
        ("Linear", (20, 30)),
        ("Conv1d", (3, 5, 3)),
        ("Conv2d", (3, 8, 3)),
        ("ConvTranspose2d", (4, 2, 3)),
        ("Embedding", (10, 4)),
        ("LSTM", (5, 7)),
        ("GRU", (5, 7)),
        ("RNN", (5, 7)),
        ("LSTMCell", (3, 4)),
        ("MultiheadAttention", (8, 2)),
    ],
)
def test_module_initialisation_is_torchs(name, args):
    def program(m):
        module = getattr(m.nn, name)(*args)
        return [p for _, p in sorted(module.state_dict().items())] + [m.rand(2)]

    _same(program, 0)


# --- data utilities and distributions ------------------------------------------------------


def _loader_program(m):
    from importlib import import_module

    data = import_module(f"{m.__name__}.utils.data")
    ds = data.TensorDataset(m.arange(23))
    g = m.Generator().manual_seed(5)
    out = [b[0] for b in data.DataLoader(ds, batch_size=5, shuffle=True, generator=g)]
    out += [b[0] for _ in range(2) for b in data.DataLoader(ds, batch_size=5, shuffle=True)]
    out += [
        m.tensor(s.indices)
        for s in data.random_split(range(10), [3, 7], generator=m.Generator().manual_seed(2))
    ]
    out += [m.tensor(s.indices) for s in data.random_split(range(10), [0.5, 0.5])]
    out.append(m.tensor(list(data.RandomSampler(range(9), replacement=True, num_samples=40))))
    out.append(m.tensor(list(data.SubsetRandomSampler([10, 20, 30, 40]))))
    out.append(m.tensor(list(data.WeightedRandomSampler([0.1, 0.5, 0.4, 2.0], 12))))
    w = data.WeightedRandomSampler([0.1, 0.5, 0.4, 2.0], 3, replacement=False)
    out.append(m.tensor(list(w)))
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_data_utilities_shuffle_as_torch(seed):
    _same(_loader_program, seed)


@pytest.mark.parametrize("seed", [0, 3])
def test_distribution_samples(seed):
    def program(m):
        D = m.distributions
        loc, scale = m.tensor([0.0, 1.0, -2.0]), m.tensor([1.0, 0.5, 2.0])
        return [
            D.Normal(loc, scale).sample((4,)),
            D.Normal(loc, scale).rsample((7,)),
            D.Bernoulli(m.tensor([0.2, 0.7])).sample((5,)),
            D.Bernoulli(logits=m.tensor([0.2, -0.7, 3.0])).sample(),
            D.Categorical(m.tensor([0.2, 0.3, 0.5])).sample((6,)),
            D.Categorical(m.tensor([[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]])).sample(),
            D.Uniform(m.tensor([0.0, 1.0]), m.tensor([2.0, 5.0])).sample((3,)),
        ]

    _same(program, seed)


def test_bad_arguments_raise_torchs_errors():
    same_error(lambda m: m.randint(5, 5, (2,)), torch, "from=5 >= to=5")
    same_error(lambda m: m.empty(3).uniform_(2, 1), torch, "from=2 > to=1")
    same_error(lambda m: m.empty(3).normal_(0, -1), torch, "std >= 0.0")
    same_error(lambda m: m.empty(3).exponential_(-1), torch, "lambda > 0.0")


def test_dropout_inside_layers_draws_torchs_masks():
    # recurrent dropout between layers, attention dropout: the same masks, so the outputs agree
    # to float32 rounding (their arithmetic is not bit-exact) and the stream ends at torch's
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)

    def program(m):
        lstm = m.nn.LSTM(4, 6, num_layers=3, dropout=0.4)
        gru = m.nn.GRU(4, 6, num_layers=2, dropout=0.3)
        q = m.tensor(x).reshape(1, 5, 3, 4)
        mha = m.nn.MultiheadAttention(4, 2, dropout=0.2)
        t = m.tensor(x)
        return [
            lstm(m.tensor(x))[0],
            gru(m.tensor(x))[0],
            m.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.3),
            mha(t, t, t)[0],
            mha(t, t, t, need_weights=False)[0],
        ]

    torch.manual_seed(0)
    expected = _arrays(program(torch))
    ad.manual_seed(0)
    got = _arrays(program(ad))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert np.array_equal(ad.get_rng_state().numpy(), torch.get_rng_state().numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_other_in_place_distributions(dtype):
    def program(m):
        dt = getattr(m, dtype)
        return [
            m.empty(7, dtype=dt).log_normal_(1.0, 0.5),
            m.empty(40, dtype=dt).log_normal_(),
            m.empty(9, dtype=dt).cauchy_(0.5, 2.0),
            m.empty(9, dtype=dt).geometric_(0.3),
            m.empty(5, dtype=m.int64).geometric_(0.6),
            m.randn(3, dtype=dt),
        ]

    _same(program, 23)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_continuous_fills_refuse_integers_as_torch(dtype):
    for fill in ("exponential_", "cauchy_", "uniform_", "normal_"):
        same_error(lambda m: getattr(m.empty(3, dtype=getattr(m, dtype)), fill)(), torch)
    same_error(lambda m: m.empty(3).geometric_(1.5), torch, "expects p to be in (0, 1)")
