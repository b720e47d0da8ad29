"""``torch.nn.utils``: gradient clipping, parameter/vector conversion and ``rnn``'s padding.

>>> import autodiag as torch
>>> w = torch.nn.Parameter(torch.ones(4))
>>> (w * 3).sum().backward()
>>> torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
tensor(6.)
"""

from autodiag.nn.utils import clip_grad, convert_parameters, rnn  # noqa: F401
from autodiag.nn.utils.clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_  # noqa: F401
from autodiag.nn.utils.convert_parameters import (  # noqa: F401
    parameters_to_vector,
    vector_to_parameters,
)
