"""``torch.hub``: its progress bar only. ``torch.hub.tqdm`` is ``tqdm.tqdm`` when tqdm is
installed, else PyTorch's own minimal stand-in (a byte counter with ``update``/``close``, not
iterable), as in PyTorch; scripts import it for their training loops. Loading models from a hub
(``torch.hub.load``, ``download_url_to_file`` ...) needs the network and PyTorch's checkpoints:
those names are not provided.
"""

from __future__ import annotations

import sys

__all__ = ["tqdm"]

try:
    from tqdm import tqdm
except ImportError:

    class _Faketqdm:  # PyTorch's own, same name and behaviour
        """PyTorch's fallback when tqdm is not installed: counts what ``update`` is given and
        writes the count (or percentage of ``total``) to stderr; not iterable."""

        def __init__(self, total=None, disable=False, unit=None, *args, **kwargs):
            self.total = total
            self.disable = disable
            self.n = 0

        def update(self, n):
            if self.disable:
                return
            self.n += n
            if self.total is None:
                sys.stderr.write(f"\r{self.n:.1f} bytes")
            else:
                sys.stderr.write(f"\r{100 * self.n / float(self.total):.1f}%")
            sys.stderr.flush()

        def set_description(self, *args, **kwargs):
            pass

        def write(self, s):
            sys.stderr.write(f"{s}\n")

        def close(self):
            self.disable = True

        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc_val, exc_tb):
            if self.disable:
                return
            sys.stderr.write("\n")

    tqdm = _Faketqdm
