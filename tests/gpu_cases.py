"""The GPU correctness matrix, shared by the GPU tests and by tools that prewarm for them.

Every M, N, K of the foundation issue appears with every (N, K) pair; group size, activation
dtype, input kind (CuPy / torch), a poisoned preallocated output and a bias rotate through the
cases so that each value of each axis meets many shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

MS = (1, 2, 7, 16, 33, 64, 127, 256, 1000, 4096)
NS = (64, 256, 4160, 6144, 14336)
KS = (128, 4096, 14336)
GROUPS = (-1, 32, 64, 128)
ACTS = ("float16", "bfloat16")


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    group: int
    act: str
    kind: str  # "cupy" or "torch"
    poison_out: bool
    bias: bool

    @property
    def id(self) -> str:
        g = "gc" if self.group < 0 else f"g{self.group}"
        return (
            f"m{self.m}-n{self.n}-k{self.k}-{g}-{self.act}-{self.kind}"
            f"{'-out' if self.poison_out else ''}{'-bias' if self.bias else ''}"
        )


def cases() -> list[Case]:
    out = []
    i = 0
    for n in NS:
        for k in KS:
            for m in MS:
                group = GROUPS[i % 4]
                act = ACTS[(i // 4) % 2]
                kind = ("cupy", "torch")[(i // 8) % 2]
                out.append(Case(m, n, k, group, act, kind, poison_out=(i % 3 == 0), bias=(i % 5 == 1)))
                i += 1
    return out


def run_forced(qw, m, act, spec, rng, bias=True, lda=None, pad=0.0, x_mean=0.0):
    """Run kernel `spec` through the launcher (the planner bypassed) on torch tensors at M = m,
    x rows `lda` apart with `pad` in the columns past K (x: standard normal plus `x_mean`), into a
    poisoned (NaN) output; returns (y, float64 reference). GPU only."""
    import numpy as np
    import torch

    from jitmarlin.ops.linear import _prepare, _torch_stream
    from jitmarlin.reference import linear_reference
    from jitmarlin.weights import halves

    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[act]
    k = qw.in_features
    lda = lda or k
    x = halves.round_to(rng.standard_normal((m, k)) + x_mean, act)
    b = halves.round_to(rng.standard_normal(qw.out_features), act) if bias else None
    ref = linear_reference(x, qw, b, act)
    xs = torch.full((m, lda), pad, dtype=dt, device="cuda")
    xs[:, :k] = torch.from_numpy(x).to("cuda", dt)
    bt = None if b is None else torch.from_numpy(b).to("cuda", dt)
    out = torch.full((m, qw.out_features), float("nan"), dtype=dt, device="cuda")  # poisoned
    lz = _prepare(qw, 0, act, m, _torch_stream(torch, 0), spec=spec)
    assert lz.plan.spec == spec
    lz(xs.data_ptr(), lda, out.data_ptr(), 0 if bt is None else bt.data_ptr())
    torch.cuda.synchronize()
    y = out.double().cpu().numpy()
    bad = np.argwhere(np.isnan(y))
    assert not len(bad), (
        f"{spec.name} M={m}: {len(bad)} unwritten (NaN) output elements, first at row {bad[0][0]}, column {bad[0][1]}"
    )
    check_workspace_clean(lz)
    return y, ref


def check_forced(qw, m, act, spec, rng, *, what="", seed=None, **kw):
    """run_forced(qw, m, act, spec, rng, **kw), its output checked element by element against the
    float64 reference (jitmarlin.reference.check_output: every element written, finite and within
    the bound; the margin recorded under spec's family). Returns (y, ref). GPU only."""
    from jitmarlin.reference import check_output

    y, ref = run_forced(qw, m, act, spec, rng, **kw)
    check_output(y, ref, act, what=what or f"M={m}", seed=seed, spec=spec)
    return y, ref


def launched_spec(qw, act, m, device=0):
    """The kernel spec of the launcher linear() last prepared for (device, act, M rows) on `qw`
    (any stream, with or without PDL), or None where it prepared none."""
    specs = [
        lz.plan.spec
        for key, lz in getattr(qw, "_launchers", {}).items()
        if tuple(key[:3]) == (device, act, m) and hasattr(lz, "plan")
    ]
    return specs[-1] if specs else None


def check_linear(y, ref, act, qw, m, *, what="", seed=None, device=0):
    """check_output for an output of jitmarlin.linear() (or of a module over it) against the
    float64 reference `ref` (NumPy or CuPy): the margin is recorded under the family of the
    kernel linear() ran for these M rows of `qw`, or under 'linear' where that is unknown."""
    import numpy as np

    from jitmarlin.jit.arrays import to_host
    from jitmarlin.reference import check_output

    ref = np.asarray(to_host(ref), dtype=np.float64)
    spec = launched_spec(qw, act, m, device)
    return check_output(
        y, ref, act, what=what or f"M={m}", seed=seed, spec=spec, family=None if spec is not None else "linear"
    )


def check_workspace_clean(lz) -> None:
    """After a launch has finished: its stream's workspace holds no count and no tag (the kernels
    reset what they use; a count left behind would let the next launch's finisher add partial
    sums before they are stored)."""
    import numpy as np

    from jitmarlin.kernels import launch as family_launch

    ws = getattr(lz, "keep", None)
    if isinstance(ws, family_launch.Workspace):
        assert not bool(ws.locks.any()), f"{lz.plan.spec.name}: workspace counters left non-zero"
        tags = ws.tagged.view(np.uint32)[1::2]  # the high words of the 64-bit slots
        assert not bool(tags.any()), f"{lz.plan.spec.name}: tagged workspace slots left"


def rel(y, ref) -> float:
    """||y - ref|| / ||ref||: for comparisons of errors (tools, and one kernel's error against
    another's); a kernel output's correctness goes through check_forced / check_linear."""
    import numpy as np

    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
