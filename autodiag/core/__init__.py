"""The engine core: what ``Tensor`` is built on, below it (NOTE [Layers]).

``graph`` (Node, AccumulateGrad, edges, saved tensors and version checks, hook handles, graph
walks), ``grad_mode`` (no_grad and friends: every op reads it), ``errors`` (the engine's error
messages) and ``bindings`` (the names of higher layers this one calls at run time, bound by
them at import). Nothing here imports ``autodiag.tensor``, ``ops`` or ``autograd``.

NOTE [Layers]
The package is layered, each layer importing only from those below it (tests/
test_import_layers.py holds it): base (dtypes, size, trace.sites) <- core and the event API
(``autodiag.core``, ``autodiag.trace``) <- ``tensor`` <- ``ops`` <- ``autograd`` (backward,
grad, Function, functional, gradcheck, anomaly mode) <- nn, optim, utils <- the ``autodiag``
namespace <- target, analysis <- report <- cli. Where a lower layer must call into a higher
one at run time (the Tensor class, the backward engine), the higher one binds the name once at
import through ``core.bindings``; those bindings are the only exceptions the test allows.
"""
