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
