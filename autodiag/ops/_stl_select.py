"""libstdc++'s ``nth_element``, ``sort`` and ``partial_sort`` over a Python list, step by step,
for PyTorch's CPU topk (ATen's ``topk_impl_loop``), whose comparator looks at values only: among
equal values (and among NaNs) the order it leaves depends on these algorithms' swaps.

NOTE [topk ties]
PyTorch's topk fills a queue of (value, index) pairs and, with k * 64 <= n, calls
``std::partial_sort(queue, queue + k, queue + n)``; otherwise ``std::nth_element(queue,
queue + k - 1, queue + n)`` and, when sorted, ``std::sort(queue, queue + k - 1)``; the first
k pairs are the result. The comparator (largest: NaN above every number, then ``>``) is not a
total order on pairs, so the indices of tied values, and through them the gradient, are the
algorithms'. The functions below follow GCC's stl_algo.h / stl_heap.h (introselect,
introsort with a 16-element threshold and a final insertion sort, heap select): the same
comparisons in the same order, so the same swaps.
"""

from __future__ import annotations


def _lg(n: int) -> int:
    return n.bit_length() - 1


def _move_median_to_first(q, result, a, b, c, comp) -> None:
    if comp(q[a], q[b]):
        if comp(q[b], q[c]):
            q[result], q[b] = q[b], q[result]
        elif comp(q[a], q[c]):
            q[result], q[c] = q[c], q[result]
        else:
            q[result], q[a] = q[a], q[result]
    elif comp(q[a], q[c]):
        q[result], q[a] = q[a], q[result]
    elif comp(q[b], q[c]):
        q[result], q[c] = q[c], q[result]
    else:
        q[result], q[b] = q[b], q[result]


def _unguarded_partition(q, first, last, pivot, comp) -> int:
    while True:
        while comp(q[first], q[pivot]):
            first += 1
        last -= 1
        while comp(q[pivot], q[last]):
            last -= 1
        if not first < last:
            return first
        q[first], q[last] = q[last], q[first]
        first += 1


def _unguarded_partition_pivot(q, first, last, comp) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(q, first, first + 1, mid, last - 1, comp)
    return _unguarded_partition(q, first + 1, last, first, comp)


def _unguarded_linear_insert(q, last, comp) -> None:
    val = q[last]
    nxt = last - 1
    while comp(val, q[nxt]):
        q[last] = q[nxt]
        last = nxt
        nxt -= 1
    q[last] = val


def _insertion_sort(q, first, last, comp) -> None:
    if first == last:
        return
    for i in range(first + 1, last):
        if comp(q[i], q[first]):
            val = q[i]
            q[first + 1 : i + 1] = q[first:i]
            q[first] = val
        else:
            _unguarded_linear_insert(q, i, comp)


def _push_heap(q, base, hole, top, value, comp) -> None:
    parent = (hole - 1) // 2
    while hole > top and comp(q[base + parent], value):
        q[base + hole] = q[base + parent]
        hole = parent
        parent = (hole - 1) // 2
    q[base + hole] = value


def _adjust_heap(q, base, hole, length, value, comp) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(q[base + child], q[base + child - 1]):
            child -= 1
        q[base + hole] = q[base + child]
        hole = child
    if length & 1 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        q[base + hole] = q[base + child - 1]
        hole = child - 1
    _push_heap(q, base, hole, top, value, comp)


def _make_heap(q, first, last, comp) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(q, first, parent, length, q[first + parent], comp)
        if parent == 0:
            return
        parent -= 1


def _pop_heap(q, first, last, result, comp) -> None:
    value = q[result]
    q[result] = q[first]
    _adjust_heap(q, first, 0, last - first, value, comp)


def _heap_select(q, first, middle, last, comp) -> None:
    _make_heap(q, first, middle, comp)
    for i in range(middle, last):
        if comp(q[i], q[first]):
            _pop_heap(q, first, middle, i, comp)


def _sort_heap(q, first, last, comp) -> None:
    while last - first > 1:
        last -= 1
        _pop_heap(q, first, last, last, comp)


def partial_sort(q, first, middle, last, comp) -> None:
    _heap_select(q, first, middle, last, comp)
    _sort_heap(q, first, middle, comp)


def nth_element(q, first, nth, last, comp) -> None:
    if first == last or nth == last:
        return
    depth = _lg(last - first) * 2
    while last - first > 3:
        if depth == 0:
            _heap_select(q, first, nth + 1, last, comp)
            q[first], q[nth] = q[nth], q[first]
            return
        depth -= 1
        cut = _unguarded_partition_pivot(q, first, last, comp)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(q, first, last, comp)


def sort(q, first, last, comp) -> None:
    if first == last:
        return
    # introsort's loop, its recursion on the right part kept on an explicit stack
    stack = [(first, last, _lg(last - first) * 2)]
    while stack:
        lo, hi, depth = stack.pop()
        while hi - lo > 16:
            if depth == 0:
                partial_sort(q, lo, hi, hi, comp)
                break
            depth -= 1
            cut = _unguarded_partition_pivot(q, lo, hi, comp)
            stack.append((cut, hi, depth))
            hi = cut
    if last - first > 16:
        _insertion_sort(q, first, first + 16, comp)
        for i in range(first + 16, last):
            _unguarded_linear_insert(q, i, comp)
    else:
        _insertion_sort(q, first, last, comp)


def topk_row(values: list, k: int, largest: bool, sorted_: bool) -> list:
    """The indices PyTorch's ``topk_impl_loop`` leaves in its queue's first ``k`` places for
    one row of ``values`` (Python floats or ints)."""
    if largest:

        def comp(x, y):
            a, b = x[0], y[0]
            return (a != a and b == b) or a > b
    else:

        def comp(x, y):
            a, b = x[0], y[0]
            return (a == a and b != b) or a < b

    n = len(values)
    q = [(v, j) for j, v in enumerate(values)]
    if k * 64 <= n:
        partial_sort(q, 0, k, n, comp)
    else:
        nth_element(q, 0, k - 1, n, comp)
        if sorted_:
            sort(q, 0, k - 1, comp)
    return [j for _, j in q[:k]]
