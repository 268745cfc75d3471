"""Array interop: NumPy, CuPy, torch and any __dlpack__ producer, without importing the
frameworks unless the caller uses them."""

from __future__ import annotations

import sys

import numpy as np


def _torch():
    return sys.modules.get("torch")


def _cupy():
    return sys.modules.get("cupy")


def is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_cupy(x) -> bool:
    cp = _cupy()
    return cp is not None and isinstance(x, cp.ndarray)


def to_host(a) -> np.ndarray:
    """Any array (NumPy, CuPy, torch, list) -> NumPy on the host. bfloat16 becomes float32."""
    if isinstance(a, np.ndarray):
        return a
    if is_torch(a):
        t = a.detach()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.cpu().numpy()
    if is_cupy(a):
        return a.get()
    if hasattr(a, "__dlpack__") and not isinstance(a, (list, tuple)):
        try:
            return np.from_dlpack(a)
        except Exception:
            cp = __import__("cupy")
            return cp.from_dlpack(a).get()
    return np.asarray(a)
