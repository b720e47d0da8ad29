"""``torch.utils.data`` on autodiag, against PyTorch (the oracle): datasets, ``default_collate``,
``DataLoader`` batches, ``random_split`` lengths, errors. Random order cannot match PyTorch's
(another generator), so shuffling is checked by its properties: a permutation per epoch, the
same order under the same seed. And a training loop on ``TensorDataset`` + ``DataLoader``
written with ``import torch`` runs under the CLI."""

from __future__ import annotations

import collections
import json
import warnings

import numpy as np
import pytest
from cli_helpers import cli

import autodiag as ad
import autodiag.utils.data as add


def both(torch):
    import torch.utils.data as tud

    return [("torch", torch, tud), ("autodiag", ad, add)]


def plain(x):
    """A comparable picture of a (nested) batch: tensors as (dtype, values), container types
    kept by name."""
    if hasattr(x, "dtype") and hasattr(x, "tolist") and not isinstance(x, np.ndarray):
        return ("tensor", str(x.dtype).rsplit(".", 1)[-1], tuple(x.shape), x.tolist())
    if isinstance(x, dict):
        return ("dict", {k: plain(v) for k, v in x.items()})
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return (type(x).__name__, [plain(v) for v in x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [plain(v) for v in x])
    return x


def same(torch, fn):
    """``fn(T, data)`` on both engines; returns the autodiag result after asserting equality."""
    out = {name: plain(fn(T, D)) for name, T, D in both(torch)}
    assert out["autodiag"] == out["torch"]
    return out["autodiag"]


def raises_same(torch, fn, exc, phrase):
    for _, T, D in both(torch):
        with pytest.raises(exc, match=phrase):
            fn(T, D)


# --- datasets -----------------------------------------------------------------------------------


def _tds(T, D):
    return D.TensorDataset(T.arange(12.0).reshape(6, 2), T.arange(6) * 10)


@pytest.mark.parametrize("index", [0, 3, -1, slice(1, 4), [0, 5, 2]])
def test_tensor_dataset_indexing(torch, index):
    same(torch, lambda T, D: (len(_tds(T, D)), _tds(T, D)[index]))


def test_tensor_dataset_size_mismatch(torch):
    raises_same(
        torch,
        lambda T, D: D.TensorDataset(T.zeros(3, 2), T.zeros(4)),
        AssertionError,
        "Size mismatch between tensors",
    )


def test_subset_and_concat(torch):
    def run(T, D):
        ds = _tds(T, D)
        sub = D.Subset(ds, [4, 1, 3])
        cat = D.ConcatDataset([sub, ds])
        plus = sub + ds
        return (
            len(sub),
            sub[0],
            sub[-1],
            sub[[0, 2]],
            len(cat),
            cat.cumulative_sizes,
            [cat[i] for i in (0, 2, 3, 8, -1, -9)],
            type(plus).__name__,
            len(plus),
            plus[5],
        )

    same(torch, run)


def test_concat_errors(torch):
    raises_same(
        torch,
        lambda T, D: D.ConcatDataset([]),
        AssertionError,
        "datasets should not be an empty iterable",
    )
    raises_same(
        torch,
        lambda T, D: D.ConcatDataset([stream(D, 2)]),
        AssertionError,
        "ConcatDataset does not support IterableDataset",
    )
    raises_same(
        torch,
        lambda T, D: D.IterableDataset(),
        TypeError,
        "Can't instantiate abstract class IterableDataset",
    )
    raises_same(
        torch,
        lambda T, D: D.ConcatDataset([_tds(T, D)])[-7],
        ValueError,
        "absolute value of index should not exceed dataset length",
    )
    raises_same(
        torch,
        lambda T, D: D.Dataset()[0],
        NotImplementedError,
        "Subclasses of Dataset should implement __getitem__",
    )


def test_stack_dataset(torch):
    def run(T, D):
        ds = _tds(T, D)
        return D.StackDataset(ds, ds)[1], D.StackDataset(a=ds, b=ds)[2], len(D.StackDataset(ds))

    same(torch, run)
    raises_same(
        torch,
        lambda T, D: D.StackDataset(_tds(T, D), [1, 2]),
        ValueError,
        "Size mismatch between datasets",
    )


# --- default_collate ----------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])

BATCHES = {
    "ints": lambda T: [0, 1, 2],
    "floats": lambda T: [0.5, 1.25],
    "bools": lambda T: [True, False],
    "strings": lambda T: ["a", "b"],
    "tuples": lambda T: [(0, 1.5, "a"), (2, 3.5, "b")],
    "lists": lambda T: [[0, 1], [2, 3]],
    "dicts": lambda T: [{"x": T.tensor([1.0, 2.0]), "y": 0}, {"x": T.tensor([3.0, 4.0]), "y": 1}],
    "namedtuples": lambda T: [Point(0, 1.0), Point(2, 3.0)],
    "namedtuples of strings": lambda T: [Point("a", 1.0), Point("b", 3.0)],
    "tensors": lambda T: [T.tensor([1, 2]), T.tensor([3, 4])],
    "float64 tensors": lambda T: [T.tensor(1.0, dtype=T.float64), T.tensor(2.0, dtype=T.float64)],
    "numpy arrays": lambda T: [
        np.array([1.0, 2.0], dtype=np.float32),
        np.array([3.0, 4.0], dtype=np.float32),
    ],
    "numpy int arrays": lambda T: [np.array([1, 2]), np.array([3, 4])],
    "numpy scalars": lambda T: [np.float64(1.5), np.float64(2.5)],
    "numpy int32": lambda T: [np.int32(1), np.int32(2)],
    "nested": lambda T: [
        {"p": Point(T.ones(2), [1, 2.0]), "s": "u"},
        {"p": Point(T.zeros(2), [3, 4.0]), "s": "v"},
    ],
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_default_collate(torch, name):
    same(torch, lambda T, D: D.default_collate(BATCHES[name](T)))


@pytest.mark.parametrize("name", ["ints", "tuples", "numpy arrays", "namedtuples", "dicts"])
def test_default_convert(torch, name):
    same(torch, lambda T, D: [D.default_convert(s) for s in BATCHES[name](T)])


def test_default_collate_errors(torch):
    raises_same(
        torch,
        lambda T, D: D.default_collate([object(), object()]),
        TypeError,
        "batch must contain tensors, numpy arrays, numbers, dicts or lists",
    )
    raises_same(
        torch,
        lambda T, D: D.default_collate([[1, 2], [3]]),
        RuntimeError,
        "each element in list of batch should be of equal size",
    )


# --- DataLoader (deterministic) -----------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 2, 4, 6, 7])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_batches_and_len(torch, batch_size, drop_last):
    same(
        torch,
        lambda T, D: (lambda dl: (len(dl), list(dl)))(
            D.DataLoader(_tds(T, D), batch_size=batch_size, drop_last=drop_last)
        ),
    )


class Pairs:
    """A map-style dataset that is not a Dataset subclass: dicts of Python numbers."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"i": i, "f": i / 4, "name": f"s{i}"}


def test_loader_dict_samples_batch_size_none_and_custom_collate(torch):
    def run(T, D):
        return (
            list(D.DataLoader(Pairs(), batch_size=2)),
            list(D.DataLoader(Pairs(), batch_size=None)),
            list(D.DataLoader(_tds(T, D), batch_size=4, collate_fn=lambda b: len(b))),
            list(D.DataLoader([np.array([i, i]) for i in range(3)], batch_size=None)),
        )

    same(torch, run)


def test_loader_with_samplers(torch):
    def run(T, D):
        ds = _tds(T, D)
        bs = D.BatchSampler(D.SequentialSampler(range(5)), batch_size=2, drop_last=False)
        return (
            list(D.DataLoader(ds, batch_sampler=[[5, 0], [2]])),
            len(D.DataLoader(ds, batch_sampler=bs)),
            list(D.DataLoader(ds, sampler=[3, 1], batch_size=2)),
            list(bs),
            list(D.BatchSampler(range(7), 3, True)),
            len(D.BatchSampler(range(7), 3, True)),
            list(D.SequentialSampler(range(3))),
        )

    same(torch, run)


def stream(D, n):
    """An IterableDataset of ``D`` (torch's or autodiag's) yielding (i, float(i)), i < n."""

    class Stream(D.IterableDataset):
        def __iter__(self):
            return iter([(i, float(i)) for i in range(n)])

        def __len__(self):
            return n

    return Stream()


def test_iterable_dataset_loader(torch):
    def run(T, D):
        s = stream(D, 5)
        return [
            (len(dl), list(dl))
            for dl in (
                D.DataLoader(s, batch_size=2),
                D.DataLoader(s, batch_size=2, drop_last=True),
                D.DataLoader(s, batch_size=None),
            )
        ] + [list(s + stream(D, 2)), len(s + stream(D, 2))]

    same(torch, run)


def test_num_workers_gives_the_single_process_batches(torch):
    # PyTorch's workers return the batches num_workers=0 gives (in order); autodiag loads in
    # this process and must give exactly those
    import torch.utils.data as tud

    ref = list(tud.DataLoader(_tds(torch, tud), batch_size=4))
    got = list(add.DataLoader(_tds(ad, add), batch_size=4, num_workers=2, prefetch_factor=2))
    assert plain(got) == plain(ref)


def test_what_workers_would_change_is_refused():
    with pytest.raises(NotImplementedError, match="IterableDataset.*num_workers=0"):
        add.DataLoader(stream(add, 4), num_workers=2)
    with pytest.raises(NotImplementedError, match="worker_init_fn"):
        add.DataLoader(_tds(ad, add), num_workers=1, worker_init_fn=print)
    assert add.get_worker_info() is None


@pytest.mark.parametrize(
    "kwargs,exc,phrase",
    [
        (
            {"sampler": [0, 1], "shuffle": True},
            ValueError,
            "sampler option is mutually exclusive with shuffle",
        ),
        (
            {"batch_sampler": [[0]], "batch_size": 2},
            ValueError,
            "batch_sampler option is mutually exclusive",
        ),
        ({"batch_size": None, "drop_last": True}, ValueError, "disables auto-batching"),
        ({"num_workers": -1}, ValueError, "num_workers option should be non-negative"),
        ({"persistent_workers": True}, ValueError, "persistent_workers option needs num_workers"),
        ({"prefetch_factor": 2}, ValueError, "prefetch_factor option could only be specified"),
        ({"batch_size": 0}, ValueError, "batch_size should be a positive integer value"),
        ({"timeout": -1}, ValueError, "timeout option should be non-negative"),
    ],
)
def test_loader_argument_errors(torch, kwargs, exc, phrase):
    raises_same(torch, lambda T, D: D.DataLoader(_tds(T, D), **kwargs), exc, phrase)


def test_loader_attribute_guard_and_sampler_errors(torch):
    def set_batch_size(T, D):
        D.DataLoader(_tds(T, D)).batch_size = 3

    raises_same(
        torch,
        set_batch_size,
        ValueError,
        "batch_size attribute should not be set after DataLoader is initialized",
    )
    raises_same(
        torch,
        lambda T, D: D.DataLoader(stream(D, 3), shuffle=True),
        ValueError,
        "expected unspecified shuffle option",
    )
    raises_same(
        torch,
        lambda T, D: D.RandomSampler(range(3), num_samples=0),
        ValueError,
        "num_samples should be a positive integer value",
    )
    raises_same(
        torch,
        lambda T, D: D.RandomSampler(range(3), replacement=1),
        TypeError,
        "replacement should be a boolean value",
    )
    raises_same(
        torch,
        lambda T, D: D.BatchSampler(range(3), 2, drop_last=1),
        ValueError,
        "drop_last should be a boolean value",
    )


# --- random_split -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,lengths",
    [
        (10, [3, 7]),
        (10, [0.3, 0.3, 0.4]),
        (7, [0.5, 0.5]),
        (11, [0.1] * 10),
        (5, [1.0]),
        (3, [0.25, 0.25, 0.25, 0.25]),
        (30, [0.7, 0.2, 0.1]),
        (10, [0, 10]),
    ],
)
def test_random_split_lengths_and_cover(torch, n, lengths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Length of split at index ... is 0", both
        sizes = same(
            torch,
            lambda T, D: [
                len(s)
                for s in D.random_split(range(n), lengths, generator=T.Generator().manual_seed(1))
            ],
        )
        parts = add.random_split(range(n), lengths, generator=ad.Generator().manual_seed(1))
    items = [x for p in parts for x in p]
    assert sorted(items) == list(range(n)) and sizes[1] == [len(p) for p in parts]


def test_random_split_errors_and_warning(torch):
    raises_same(
        torch,
        lambda T, D: D.random_split(range(10), [3, 6]),
        ValueError,
        "Sum of input lengths does not equal the length of the input dataset",
    )
    raises_same(
        torch,
        lambda T, D: D.random_split(range(10), [1.5, -0.5]),
        ValueError,
        "Fraction at index 0 is not between 0 and 1",
    )
    for _, _T, D in both(torch):
        with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
            D.random_split(range(2), [0.9, 0.1])


def test_random_split_is_seeded():
    def split(**kw):
        return [list(s) for s in add.random_split(range(20), [0.5, 0.25, 0.25], **kw)]

    g = lambda: ad.Generator().manual_seed(7)  # noqa: E731
    assert split(generator=g()) == split(generator=g())
    assert split(generator=g()) != split(generator=ad.Generator().manual_seed(8))
    ad.manual_seed(3)
    a = split()
    ad.manual_seed(3)
    assert split() == a  # the default generator is the global stream


# --- shuffle: properties ------------------------------------------------------------------------


def _epoch(loader):
    return [int(i) for _, y in loader for i in y]


def test_shuffle_is_a_permutation_each_epoch_and_seeded():
    ds = add.TensorDataset(ad.zeros(50, 1), ad.arange(50))
    loader = add.DataLoader(ds, batch_size=8, shuffle=True, generator=ad.Generator().manual_seed(0))
    e1, e2 = _epoch(loader), _epoch(loader)
    assert sorted(e1) == sorted(e2) == list(range(50))
    assert e1 != list(range(50)) and e1 != e2  # shuffled, and anew each epoch
    again = add.DataLoader(ds, batch_size=8, shuffle=True, generator=ad.Generator().manual_seed(0))
    assert [_epoch(again), _epoch(again)] == [e1, e2]
    # without a generator: seeded by torch.manual_seed, as in PyTorch
    ad.manual_seed(5)
    unseeded = add.DataLoader(ds, batch_size=8, shuffle=True)
    a, b = _epoch(unseeded), _epoch(unseeded)
    ad.manual_seed(5)
    assert [_epoch(unseeded), _epoch(unseeded)] == [a, b]
    assert sorted(a) == sorted(b) == list(range(50)) and a != b  # each epoch draws anew
    ad.manual_seed(6)
    assert _epoch(unseeded) != a


def test_random_samplers():
    g = lambda: ad.Generator().manual_seed(1)  # noqa: E731
    draws = list(add.RandomSampler(range(10), replacement=True, num_samples=70, generator=g()))
    assert len(draws) == 70 and set(draws) <= set(range(10))
    assert draws == list(add.RandomSampler(range(10), True, 70, generator=g()))
    more = list(add.RandomSampler(range(4), num_samples=10, generator=g()))
    assert sorted(more[:4]) == sorted(more[4:8]) == [0, 1, 2, 3] and len(more) == 10
    sub = list(add.SubsetRandomSampler([10, 20, 30], generator=g()))
    assert sorted(sub) == [10, 20, 30] and sub == list(
        add.SubsetRandomSampler([10, 20, 30], generator=g())
    )
    w = list(add.WeightedRandomSampler([0.0, 1.0, 3.0], 40, generator=g()))
    assert len(w) == 40 and set(w) == {1, 2}
    assert sorted(add.WeightedRandomSampler([1, 1, 1], 3, replacement=False, generator=g())) == [
        0,
        1,
        2,
    ]


def test_generator_api(torch):
    same(
        torch,
        lambda T, D: (
            T.Generator().initial_seed(),
            T.Generator().manual_seed(123).initial_seed(),
            T.Generator().manual_seed(-1).initial_seed(),
            str(T.Generator().device),
        ),
    )
    g = ad.Generator()
    assert g.manual_seed(4) is g
    s = g.seed()
    assert g.initial_seed() == s
    state = g.get_state()
    a = list(add.RandomSampler(range(30), generator=g))
    assert g.set_state(state) is g and list(add.RandomSampler(range(30), generator=g)) == a
    with pytest.raises(RuntimeError, match="CPU only"):
        ad.Generator("cuda")
    ad.default_generator.manual_seed(9)
    assert ad.default_generator.initial_seed() == 9
    x = ad.rand(3).tolist()
    ad.default_generator.manual_seed(9)
    assert ad.rand(3).tolist() == x  # the default generator is the global stream


# --- import torch, under the CLI ----------------------------------------------------------------

LOOP = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(64, 3)
y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for xb, yb in loader:
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
"""


def test_import_torch_training_loop_with_a_data_loader(script):
    r = cli("check", script(LOOP), "-f", "json")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    (f,) = [f for f in doc["findings"] if f["kind"] == "unplanned_accumulation"]
    assert f["location"]["line"] == 14 and f["steps"] == 12
    fixed = LOOP.replace("        loss = nn", "        opt.zero_grad()\n        loss = nn")
    r = cli("check", script(fixed, "fixed.py"), "-f", "json")
    assert "unplanned_accumulation" not in {f["kind"] for f in json.loads(r.stdout)["findings"]}


def test_random_factories_draw_from_their_generator():
    # a Generator passed to a factory is used, never silently replaced by the global stream
    import autodiag as ad

    def draws(seed):
        g = ad.Generator().manual_seed(seed)
        w = ad.empty(4)
        ad.nn.init.uniform_(w, generator=g)
        return [
            ad.rand(3, generator=g),
            ad.randn(2, 2, generator=g),
            ad.randint(0, 100, (5,), generator=g),
            ad.randperm(6, generator=g),
            ad.normal(0.0, 1.0, (3,), generator=g),
            ad.rand_like(w, generator=g),
            ad.empty(3).normal_(generator=g),
            w,
        ]

    ad.manual_seed(0)
    first = draws(7)
    ad.manual_seed(123)  # the global stream must not matter
    again = draws(7)
    other = draws(8)
    for a, b, c in zip(first, again, other):
        assert np.array_equal(a.numpy(), b.numpy())
        assert not np.array_equal(a.numpy(), c.numpy())
