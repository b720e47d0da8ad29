"""KNOWN-ISSUE FILTER: difference classes found by the fuzzer and not fixed yet.

The CI fuzz test counts programs whose (shrunk) difference class matches one of these entries
apart: they are listed in the test's output with their issue, never silently skipped, and they do
not fail the test. Each entry is an (op, class) pair: ``ops`` a regex on the ops part of the class
label (``relu`` or ``mul+relu``) and ``diff`` a regex on what differed (``grad value: nan vs 0``),
with the issue's text. An entry is removed when its class is fixed; an entry that matched no
program of a run is listed by ``tests/test_fuzz_torch.py`` (which then fails) when
``FUZZ_STALE=1``, and by ``tests/fuzz/run.py --known`` at the end of its report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownIssue:
    branch: str
    ops: str  # regex searched in the ops part of the label
    diff: str  # regex searched in the difference part of the label
    issue: str

    def matches(self, label: str) -> bool:
        ops, _, diff = label.partition(" | ")
        return re.search(self.ops, ops) is not None and re.search(self.diff, diff) is not None


KNOWN_ISSUES: list[KnownIssue] = [
    # ---- found by the fuzzer, not fixed yet (`python tests/fuzz/run.py --known` lists them) --
    KnownIssue(
        "pytorch",
        r"(^|\+)embedding(\+|$)",
        r"^grad2 exception: ok vs RuntimeError",
        "PyTorch's bug: embedding's double backward with an empty index raises 'cannot "
        "reshape tensor of 0 elements into shape [0, -1]'; autodiag returns the zero "
        "gradient (README 'Where autodiag differs')",
    ),
    KnownIssue(
        "platform",
        r"(^|\+)(matmul|mm|bmm|linear|einsum|addmm|baddbmm|addbmm|addmv|mv|dot|inner|outer|"
        r"tensordot|bilinear|conv[123]d|conv_transpose[123]d)(\.[a-z_]+)?(\+|$)",
        r"^(grad2?|forward) value: -?0 vs -?0$",
        "sign of a zero sum of products: PyTorch's BLAS (MKL) kernels keep -0.0 for a sum of "
        "negative zeros where numpy's (OpenBLAS) accumulation starts at +0.0, and both choose "
        "their kernels by size (README 'Where autodiag differs'); values equal",
    ),
    KnownIssue(
        "platform",
        r"(^|\+)(amax|amin|max|min)(\.[a-z_]+)?(\+|$)",
        r"^forward value: -?0 vs -?0$",
        "sign of a zero among tied zeros in a max/min reduction: PyTorch's scalar reduction "
        "keeps the first of the tied values, its vectorised one (AVX2 lanes) a later one, by "
        "size and layout; numpy's keeps the last (README 'Where autodiag differs'); values "
        "equal",
    ),
    KnownIssue(
        "open",
        r"(^|\+)layer_norm(\.[a-z_]+)?(\+|$)",
        r"^(grad2?|forward) value: -?0 vs -?0$",
        "sign of a zero from layer_norm and its gradients: PyTorch's statistics and its "
        "kernels' order of operations (the layer_norm statistics entry below); values equal",
    ),
    KnownIssue(
        "open",
        r".",
        r"^grad2? value: -?0 vs -?0$",
        "sign of a zero in a gradient: formulas recorded from other ops than PyTorch's backward "
        "ops (README 'Where autodiag differs'); values equal",
    ),
    KnownIssue(
        "open",
        r"(^|\+)(log_softmax|gelu|softplus)(\.[a-z_]+)?(\+|$)",
        r"^grad2 value: (finite|nan|0) vs (-?inf|nan|finite)$|^grad2 value: different finite",
        "second derivative of log_softmax/gelu/softplus: recorded from sub/mul/sum/exp nodes, "
        "not PyTorch's double-backward ops (ops/reduction.py LogSoftmaxBackward0): with an "
        "infinite or NaN incoming gradient the result can be NaN or finite where PyTorch's is "
        "±inf, and float32 cancellations round otherwise (README 'Where autodiag differs')",
    ),
    KnownIssue(
        "platform",
        r"(^|\+)(remainder|fmod)(\+|$)",
        r"^forward value: finite vs nan$",
        "remainder where |a / b| overflows (a denormal divisor): PyTorch's CPU kernel gives "
        "NaN in its SIMD body (SLEEF fmod; 8 float64 / 16 float32 elements a step with "
        "AVX2) and the exact value in its scalar tail, so by size, layout and CPU; "
        "autodiag gives the exact one (README 'Where autodiag differs')",
    ),
    KnownIssue(
        "pytorch",
        r"(^|\+)conv1d(\+|$)",
        r"^forward value: nan vs (finite|-?inf)$",
        "convolution of a non-finite value with the zero padding: PyTorch's float32 batched "
        "CPU path (oneDNN) skips the padding (the window's other terms only), its float64 and "
        "unbatched-to-one paths multiply it (0 * inf = NaN) as autodiag does: "
        "conv1d(ones(2, 3, 1), w with -inf, padding=1) is 3 in float32, NaN in float64",
    ),
    KnownIssue(
        "platform",
        r"(^|\+)elu(\+|$)",
        r"^grad2? value: finite vs nan$",
        "elu's gradient at a NaN input: PyTorch's CPU kernel takes the exponential branch "
        "(NaN) in its SIMD body (x > 0 selects; 8 float64 / 16 float32 elements a step with "
        "AVX2) and the linear one (finite) in its scalar tail (x <= 0 selects), so by size, "
        "layout and CPU; autodiag follows the scalar formula (ops/attention.py NOTE [elu "
        "backward])",
    ),
    KnownIssue(
        "open",
        r"(^|\+)div_(\+|$)",
        r"^grad2 value: different finite values$",
        "second derivative through in-place div_ where its exact value is 0 ((2.5 * x) / x): "
        "float32 cancellation noise in both libraries, from other operation orders "
        "(measured: -6.1e-05 in PyTorch, -1.2e-04 here, beside terms of 1e3 = 1/x^2); "
        "PyTorch's in-place formula order is not emulated",
    ),
    KnownIssue(
        "open",
        r"^layer_norm(\+neg_?)?$",
        r"^(forward|grad2?) value",
        "layer_norm statistics: PyTorch's are NaN where a row's mean squared overflows "
        "(its merge of Welford moments), and rows of 8+ float32 (4+ float64) elements are "
        "merged across SIMD lanes (other rounding); autodiag emulates its Welford "
        "statistics (and its kernels' fused multiply-adds) only for shorter rows without the "
        "overflow (ops/nn_ops.py); the gradients and second derivatives (PyTorch's "
        "layer_norm_double_backward, NOTE [layer_norm double backward]) read those "
        "statistics and differ with them",
    ),
    KnownIssue(
        "platform",
        r"(^|\+)logsumexp(\+|$)",
        r"^grad2 value: (0 vs finite|finite vs 0|different finite values)$",
        "float32 exp in the last place: PyTorch's exp (SLEEF's expf, 1 ulp) and numpy's round "
        "otherwise for ~40% of float32 inputs (by 1-2 ulp); logsumexp's second derivative "
        "sums terms that cancel to ~0, and shows it: -1.9e-06 in PyTorch, 0 here, for "
        "logsumexp([-3.3, -0.43]) (README 'Where autodiag differs'); values otherwise equal",
    ),
]


def known_issue_for(label: str) -> KnownIssue | None:
    for k in KNOWN_ISSUES:
        if k.matches(label):
            return k
    return None
