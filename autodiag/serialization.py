"""``torch.save`` / ``torch.load`` in a safe format: nothing is ever unpickled.

A file is a zip archive holding ``autodiag.json`` (the saved object's structure) and one
``.npy`` array per tensor, read back with ``allow_pickle=False``. What can be saved: tensors
(and ``nn.Parameter``), numbers, strings, None, bools, lists, tuples, dicts and OrderedDicts of
them (a model's or an optimizer's ``state_dict``, a checkpoint dict with the epoch), dtypes,
devices and sizes. Anything else is refused when saving, with its type named. The same tensor
saved twice loads as one tensor; views are saved as copies (their storage sharing is not kept).

PyTorch's own files pickle their contents and are refused: load them with PyTorch and save the
state dict again from a script run on autodiag.

>>> import io, autodiag as torch
>>> buf = io.BytesIO()
>>> torch.save({"epoch": 3, "w": torch.tensor([1.0, 2.0])}, buf)
>>> _ = buf.seek(0)
>>> torch.load(buf)
{'epoch': 3, 'w': tensor([1., 2.])}
"""

from __future__ import annotations

import collections
import io
import json
import os
import zipfile

import numpy as np

from autodiag import _device, dtypes
from autodiag.size import Size
from autodiag.tensor import Tensor

FORMAT = "autodiag.save/1"
_MANIFEST = "autodiag.json"


def save(
    obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization: bool = True
) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object)."""
    if pickle_module is not None:
        raise NotImplementedError(
            "autodiag's torch.save never pickles: pickle_module is not supported"
        )
    arrays: list = []
    seen: dict = {}
    tree = _encode(obj, arrays, seen, "obj")
    own = isinstance(f, (str, os.PathLike))
    fh = open(f, "wb") if own else f  # noqa: SIM115 - closed below when we opened it
    try:
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
            z.writestr(_MANIFEST, json.dumps({"format": FORMAT, "object": tree}))
            for i, a in enumerate(arrays):
                buf = io.BytesIO()
                np.save(buf, a, allow_pickle=False)
                z.writestr(f"tensors/{i}.npy", buf.getvalue())
    finally:
        if own:
            fh.close()


def load(
    f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args
):
    """Read what :func:`save` wrote (a path or a binary file object)."""
    if (
        map_location is not None
        and not callable(map_location)
        and not isinstance(map_location, dict)
    ):
        _device.check(map_location)
    name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else "the file"
    try:
        z = zipfile.ZipFile(f, "r")
    except (zipfile.BadZipFile, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise RuntimeError(
            f"torch.load: {name} is not a file written by autodiag's torch.save (not a zip archive)"
        ) from None
    with z:
        names = set(z.namelist())
        if _MANIFEST not in names:
            pytorch = any(n.endswith("data.pkl") for n in names)
            raise RuntimeError(
                f"torch.load: {name} is "
                + (
                    "a PyTorch file, which holds pickled objects: "
                    "autodiag never unpickles. Load it with PyTorch "
                    "and save its state dict from a script run on "
                    "autodiag"
                    if pytorch
                    else "not a file written by autodiag's torch.save"
                )
            )
        doc = json.loads(z.read(_MANIFEST))
        if doc.get("format") != FORMAT:
            raise RuntimeError(
                f"torch.load: {name} has format {doc.get('format')!r}; this "
                f"autodiag reads {FORMAT!r}"
            )

        def array(i: int) -> np.ndarray:
            with z.open(f"tensors/{i}.npy") as fa:
                return np.load(io.BytesIO(fa.read()), allow_pickle=False)

        return _decode(doc["object"], array, {})


# --- the structure: JSON scalars as themselves, everything else a one-key tagged object -------


def _encode(obj, arrays: list, seen: dict, where: str):
    if (
        obj is None
        or isinstance(obj, (bool, int, float, str))
        and type(obj) in (bool, int, float, str)
    ):
        return obj
    if isinstance(obj, Tensor):
        from autodiag.nn.parameter import Parameter

        key = seen.get(id(obj))
        if key is None:
            key = seen[id(obj)] = len(arrays)
            arrays.append(np.array(obj._data, order="C"))  # (ascontiguousarray makes 0-d 1-d)
        tag = "parameter" if isinstance(obj, Parameter) else "tensor"
        return {tag: key, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, dtypes.dtype):
        return {"dtype": obj.name}
    if isinstance(obj, _device.device):
        return {"device": str(obj)}
    if isinstance(obj, Size):
        return {"size": [int(s) for s in obj]}
    if type(obj) in (list, tuple):
        return {
            type(obj).__name__: [
                _encode(v, arrays, seen, f"{where}[{i}]") for i, v in enumerate(obj)
            ]
        }
    if type(obj) in (dict, collections.OrderedDict):
        tag = "dict" if type(obj) is dict else "odict"
        return {
            tag: [
                [
                    _encode(k, arrays, seen, f"{where} key"),
                    _encode(v, arrays, seen, f"{where}[{k!r}]"),
                ]
                for k, v in obj.items()
            ]
        }
    if isinstance(obj, (np.integer, np.floating, np.bool_)):
        return obj.item()
    raise TypeError(
        f"torch.save: {where} is a {type(obj).__module__}.{type(obj).__qualname__}, "
        "which autodiag's safe format cannot store (it stores tensors, numbers, "
        "strings, None, lists, tuples and dicts of them; it never pickles)"
    )


def _decode(node, array, made: dict):
    if not isinstance(node, dict):
        return node
    if "tensor" in node or "parameter" in node:
        key = node.get("tensor", node.get("parameter"))
        if key not in made:
            from autodiag.nn.parameter import Parameter
            from autodiag.ops._core import wrap

            t = wrap(array(key))
            if "parameter" in node:
                t = Parameter(t, requires_grad=node["requires_grad"])
            elif node["requires_grad"]:
                t.requires_grad_(True)
            made[key] = t
        return made[key]
    ((tag, value),) = node.items()
    if tag == "list":
        return [_decode(v, array, made) for v in value]
    if tag == "tuple":
        return tuple(_decode(v, array, made) for v in value)
    if tag in ("dict", "odict"):
        out = {} if tag == "dict" else collections.OrderedDict()
        for k, v in value:
            out[_decode(k, array, made)] = _decode(v, array, made)
        return out
    if tag == "dtype":
        return getattr(dtypes, value)
    if tag == "device":
        return _device.device(value)
    if tag == "size":
        return Size(value)
    raise RuntimeError(f"torch.load: unknown entry {tag!r} in the file")
