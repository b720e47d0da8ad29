"""Engines autodiag observes besides its own (``--engine``). Each lives in its own subpackage,
imported only when asked for: ``autodiag.engines.torch`` runs scripts on real PyTorch and
implements the inspection seam (``autodiag/inspect.py``) for PyTorch's graphs.

(Not ``autodiag.backends``: that is the ``torch.backends`` namespace of autodiag's own engine.)
"""
