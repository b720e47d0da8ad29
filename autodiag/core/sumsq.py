"""The sum of squares of a flat array, computed on the calling thread: what the anomaly checks
and the gradient norms are made of.

NOTE [BLAS threads]
``r.dot(r)`` is the cheapest finiteness test and norm numpy offers (one BLAS call: NOTE
[Anomaly cost] in ``analysis/anomaly.py``), but OpenBLAS splits a dot of more than 10,000
elements across its threads, and on a machine whose cores are busy, waking those threads costs
milliseconds per call. Under ``autodiag anomaly``, pytorch/examples' time_sequence_prediction
checks (204, 51) LSTM weight gradients of 10,404 elements: 30-50 ms each, 18 s of a 26 s run
whose plain run takes 4 s, and the more closure evaluations, the longer each wait. Chunks of at
most ``CHUNK`` elements stay on the calling thread (~2 us each).

>>> import numpy as np
>>> sum_of_squares(np.full(20_000, 2.0))
80000.0
"""

from __future__ import annotations

import numpy as np

CHUNK = 8192  # below OpenBLAS's threading threshold for a dot (10,000 elements)


def sum_of_squares(r: np.ndarray) -> float:
    """``r.dot(r)`` of a 1-D float array, in chunks BLAS runs on this thread (NOTE [BLAS
    threads]); NaN or inf when an element is, or when the sum overflows."""
    n = r.shape[0]
    if n <= CHUNK:
        return float(r.dot(r))
    if r.strides[0] != r.itemsize or r.dtype.char not in "fd":
        # a strided view (BLAS reads it with a stride), or no BLAS float (float16's dot and
        # matmul need not add alike): chunk by chunk, as ever
        return _chunk_by_chunk(r)
    # NOTE [Chunk dots at once]: the whole chunks' dots in one call: a batched matmul of
    # (k, 1, CHUNK) rows by (k, CHUNK, 1) columns runs numpy's vector-vector dot (the BLAS
    # call ``c.dot(c)`` makes) on each chunk in turn, in C: the same k numbers as the loop of
    # ``c.dot(c)`` it replaces, then added in the same order, so the sum is bit for bit the
    # same (tests/test_sumsq.py), 2-3x faster on a 200k-element gradient (no Python per chunk)
    k = n // CHUNK
    body = r[: k * CHUNK].reshape(k, 1, CHUNK)
    total = 0.0
    for x in np.matmul(body, body.reshape(k, CHUNK, 1)).ravel().tolist():
        total += x
    if n > k * CHUNK:
        c = r[k * CHUNK :]
        total += float(c.dot(c))
    return total


def _chunk_by_chunk(r: np.ndarray) -> float:
    """``sum_of_squares``, one ``c.dot(c)`` per chunk (the reference of NOTE [Chunk dots at
    once])."""
    total = 0.0
    for i in range(0, r.shape[0], CHUNK):
        c = r[i : i + CHUNK]
        total += float(c.dot(c))
    return total
