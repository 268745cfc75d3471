"""Device profiles: what the planner needs to know about a GPU, as frozen values.

The named profiles describe the GPUs serving fleets still run. `live_profile()` reads the GPU
that is present; `JITMARLIN_EMULATE=<name>` makes `planning_profile()` plan and render as that
named profile while code is still compiled for (and run on) the real GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from jitmarlin.errors import InputError, UnsupportedError

KB = 1024


@dataclass(frozen=True)
class DeviceProfile:
    """What the planner needs to know about one GPU model.

    cc: compute capability (major, minor). sms: streaming multiprocessors.
    smem_per_block: opt-in shared memory limit for one block, bytes.
    smem_per_sm: shared memory per SM, bytes. regs_per_sm: 32-bit registers per SM.
    l2_bytes: L2 size, bytes.
    clusters: (size, count) pairs: how many thread-block clusters of `size` blocks, one block per
    SM, the GPU holds at once (cuOccupancyMaxActiveClusters; GPCs need not divide evenly, so this
    is not sms / size). Empty where not measured: the planner then makes no cluster plans.
    """

    name: str
    cc: tuple[int, int]
    sms: int
    smem_per_block: int
    smem_per_sm: int
    l2_bytes: int
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    clusters: tuple[tuple[int, int], ...] = ()

    def cluster_capacity(self, size: int) -> int:
        """Clusters of `size` one-block-per-SM blocks resident at once (0: unknown)."""
        return dict(self.clusters).get(size, 0)

    @property
    def arch(self) -> str:
        """NVRTC target name, e.g. 'sm_90'."""
        return f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def path(self) -> str:
        """The kernel code path this GPU uses: sm70, sm75 or sm80 (also sm86/89/90/120/121)."""
        return code_path(self.cc)


def code_path(cc: tuple[int, int]) -> str:
    if cc < (7, 0):
        raise UnsupportedError(
            f"compute capability {cc[0]}.{cc[1]} is older than sm_70 (Volta); jitmarlin needs tensor cores"
        )
    if cc == (7, 0) or cc == (7, 2):
        return "sm70"
    if cc < (8, 0):
        return "sm75"
    return "sm80"


# Measured on an H100 SXM (132 SMs; tools/probe/clusters.py, tools/PERF.md entry 25): clusters of
# 4 or 8 leave 12 SMs idle. H200 and every 132-SM GH100 part are assumed to share the layout.
GH100_132_CLUSTERS = ((2, 66), (4, 30), (8, 15))

PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile("v100", (7, 0), 80, 96 * KB, 96 * KB, 6 * 1024 * KB),
        DeviceProfile("t4", (7, 5), 40, 64 * KB, 64 * KB, 4 * 1024 * KB, max_threads_per_sm=1024),
        DeviceProfile("a100", (8, 0), 108, 163 * KB, 164 * KB, 40 * 1024 * KB),
        DeviceProfile("a10", (8, 6), 72, 99 * KB, 100 * KB, 6 * 1024 * KB, max_threads_per_sm=1536),
        DeviceProfile("l4", (8, 9), 58, 99 * KB, 100 * KB, 48 * 1024 * KB, max_threads_per_sm=1536),
        DeviceProfile("rtx4090", (8, 9), 128, 99 * KB, 100 * KB, 72 * 1024 * KB, max_threads_per_sm=1536),
        DeviceProfile("h100", (9, 0), 132, 227 * KB, 228 * KB, 50 * 1024 * KB, clusters=GH100_132_CLUSTERS),
        DeviceProfile("h200", (9, 0), 132, 227 * KB, 228 * KB, 60 * 1024 * KB, clusters=GH100_132_CLUSTERS),
        # Blackwell datacenter parts (B200 / GB200: sm_100, B300: sm_103): 148 SMs, 228 KB shared
        # memory an SM (227 KB a block), 126 MB L2 (B300's assumed like B200's until measured).
        # Planned like sm_80-class GPUs (mma.sync and GEMV, no wgmma, no measured cluster counts).
        DeviceProfile("b200", (10, 0), 148, 227 * KB, 228 * KB, 126 * 1024 * KB),
        DeviceProfile("gb200", (10, 0), 148, 227 * KB, 228 * KB, 126 * 1024 * KB),
        DeviceProfile("b300", (10, 3), 148, 227 * KB, 228 * KB, 126 * 1024 * KB),
        DeviceProfile("rtx-pro-6000", (12, 0), 188, 99 * KB, 100 * KB, 128 * 1024 * KB, max_threads_per_sm=1536),
        DeviceProfile("rtx5090", (12, 0), 170, 99 * KB, 100 * KB, 96 * 1024 * KB, max_threads_per_sm=1536),
        DeviceProfile("gb10", (12, 1), 48, 99 * KB, 100 * KB, 24 * 1024 * KB, max_threads_per_sm=1536),
    )
}

ARCH_DEFAULT_PROFILE = {
    "sm_70": "v100",
    "sm_75": "t4",
    "sm_80": "a100",
    "sm_86": "a10",
    "sm_89": "l4",
    "sm_90": "h100",
    "sm_100": "b200",
    "sm_103": "b300",
    "sm_120": "rtx-pro-6000",
    "sm_121": "gb10",
}


def get_profile(name: str) -> DeviceProfile:
    """A named profile ('h100', 'v100', ...) or an arch ('sm_90' -> its reference GPU)."""
    key = name.strip().lower()
    key = ARCH_DEFAULT_PROFILE.get(key, key)
    try:
        return PROFILES[key]
    except KeyError:
        raise InputError(
            f"unknown device profile {name!r}; known: {', '.join(PROFILES)} "
            f"or an arch among {', '.join(ARCH_DEFAULT_PROFILE)}"
        ) from None


_live_cache: dict[int, DeviceProfile] = {}


def live_profile(device: int) -> DeviceProfile:
    """Profile of the GPU `device`, read from the driver through CuPy (cached per device)."""
    prof = _live_cache.get(device)
    if prof is None:
        from cupy.cuda import runtime

        p = runtime.getDeviceProperties(device)
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        prof = DeviceProfile(
            name=name,
            cc=(int(p["major"]), int(p["minor"])),
            sms=int(p["multiProcessorCount"]),
            smem_per_block=int(p["sharedMemPerBlockOptin"]),
            smem_per_sm=int(p["sharedMemPerMultiprocessor"]),
            l2_bytes=int(p["l2CacheSize"]),
            regs_per_sm=int(p["regsPerMultiprocessor"]),
            max_threads_per_sm=int(p["maxThreadsPerMultiProcessor"]),
            clusters=GH100_132_CLUSTERS
            if (int(p["major"]), int(p["minor"])) == (9, 0) and int(p["multiProcessorCount"]) == 132
            else (),
        )
        code_path(prof.cc)  # raises a clear error for pre-Volta GPUs
        _live_cache[device] = prof
    return prof


def emulated_name() -> str | None:
    v = os.environ.get("JITMARLIN_EMULATE", "").strip()
    return v or None


def planning_profile(device: int) -> DeviceProfile:
    """The profile kernels are planned and rendered for on `device`.

    Without JITMARLIN_EMULATE this is the live GPU. With it, the named profile's code path, tiles,
    stages and shared-memory budget are used, but never more SMs or shared memory than the real
    GPU has (the kernel must still fit and all of its blocks must be resident on the real GPU).
    """
    live = live_profile(device)
    name = emulated_name()
    if name is None:
        return live
    emu = get_profile(name)
    return replace(emu, sms=min(emu.sms, live.sms), smem_per_block=min(emu.smem_per_block, live.smem_per_block))
