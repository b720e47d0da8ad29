"""``autodiag.nn.utils``, as ``torch.nn.utils``."""

from autodiag.nn.utils import rnn  # noqa: F401
