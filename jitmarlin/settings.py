"""Settings read from the environment, shared by the stages that need them."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Root of jitmarlin's on-disk state: JITMARLIN_CACHE_DIR, else $XDG_CACHE_HOME/jitmarlin,
    else ~/.cache/jitmarlin."""
    env = os.environ.get("JITMARLIN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jitmarlin"


def autotune_enabled() -> bool:
    """JITMARLIN_AUTOTUNE=1 (or true/yes/on): tune a problem bucket on the GPU at its first call
    when no tuned choice is stored (jitmarlin.kernels.tuned.choose_for)."""
    return os.environ.get("JITMARLIN_AUTOTUNE", "").strip().lower() in ("1", "true", "yes", "on")


def pdl_default() -> bool:
    """JITMARLIN_PDL=1 (or true/yes/on): linear() launches the fused kernels with programmatic
    dependent launch on sm_90+ unless a call says otherwise (enable_pdl=False)."""
    v = os.environ.get("JITMARLIN_PDL")  # read on every linear() call: the unset case stays cheap
    return v is not None and v.strip().lower() in ("1", "true", "yes", "on")


def cache_shared_group() -> bool:
    """JITMARLIN_CACHE_SHARED=group: the cache dir is shared by a group (dirs setgid 2770, files
    0660, group-writable accepted). Unset: private (0700 / 0600, owner checked)."""
    return os.environ.get("JITMARLIN_CACHE_SHARED", "").strip().lower() == "group"


DEFAULT_LOCK_TIMEOUT_S = 60.0


def lock_timeout_s() -> float:
    """JITMARLIN_LOCK_TIMEOUT_S (default 60): how long a process waits for another one's compile
    lock before compiling in memory itself."""
    raw = os.environ.get("JITMARLIN_LOCK_TIMEOUT_S", "").strip()
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S
