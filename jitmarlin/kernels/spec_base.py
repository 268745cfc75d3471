"""What every kernel family's spec shares (the weight-format fields' meaning, tile sizes) and the
spec-kind registry: a stored canonical text names its kind by a "family" or "route" field (a
KernelSpec's has neither), and spec_from_canonical() rebuilds it. Each family registers its spec
class where it defines it (register_kind)."""

from __future__ import annotations

import json
from dataclasses import fields

from jitmarlin.weights.qtypes import ACT_DTYPES, QTYPES

PATHS = ("sm70", "sm75", "sm80")  # the mma.sync code paths
THREADS = 256  # 8 warps per block
WARPS = THREADS // 32


class _WeightFormat:
    """What a spec's quant type and group field imply (shared by every spec kind)."""

    @property
    def bits(self) -> int:
        return QTYPES[self.qtype].bits

    @property
    def affine(self) -> bool:
        """Weights carry an offset per group and column (zero points): w = decode(q) * s + m."""
        return QTYPES[self.qtype].zero_points

    @property
    def group_size(self) -> int:
        return -1 if self.group_blocks <= 0 else 16 * self.group_blocks

    @property
    def group_tag(self) -> str:
        """The group part of kernel names: gc (per-channel), gk (per-channel with offsets), g128."""
        return {-1: "gc", 0: "gk"}.get(self.group_blocks, f"g{16 * self.group_blocks}")

    def check_types(self, paths: tuple[str, ...], kernel: str = "") -> None:
        """ValueError unless the spec's code path is one of `paths` and its quant type and
        activation dtype are known. `kernel` names a family built for one path only (its message
        says so)."""
        if self.path not in paths:
            if kernel:
                gpus = {"sm80": "sm_80+", "sm90": "sm_90a"}.get(paths[0], paths[0])
                raise ValueError(f"the {kernel} kernel is built for the {paths[0]} path ({gpus}), not {self.path!r}")
            raise ValueError(f"unknown code path {self.path!r}")
        if self.qtype not in QTYPES:
            raise ValueError(f"unknown quant type {self.qtype!r}")
        if self.act not in ACT_DTYPES:
            raise ValueError(f"unknown activation dtype {self.act!r}")

    def kernel_spec(self):
        """The spec of the compiled kernel (render() and the kernel cache take it): the spec
        itself, less any field that picks a plan rather than code (KernelSpec.whole)."""
        return self

    @classmethod
    def from_canonical(cls, text: str):
        """The spec whose canonical() is `text` (fields it does not have are ignored; use
        spec_from_canonical(), which also checks the text round-trips)."""
        d = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class _Tiles:
    """Tile sizes in elements of a spec with tm, tn, tk (16-element blocks)."""

    @property
    def tile_m(self) -> int:
        return 16 * self.tm

    @property
    def tile_n(self) -> int:
        return 16 * self.tn

    @property
    def tile_k(self) -> int:
        return 16 * self.tk


# ---- spec kinds ----------------------------------------------------------------------------------
# Every kind of spec a plan can carry, by the name stored next to its canonical text (tuned
# choices, bundles). A new kind (another code path, a library route) registers its class here;
# it needs canonical(), a classmethod from_canonical(text) and a `name`.
SPEC_KINDS: dict[str, type] = {}
# The kind a canonical text names through its "route" field (a KernelSpec's has none).
ROUTE_KINDS: dict[str, str] = {}
# The kind a canonical text names through its "family" field.
FAMILY_KINDS: dict[str, str] = {}


def register_kind(cls: type, family: str | None = None, route: str | None = None) -> None:
    """Register a spec class whose canonical text carries `"family": family` or `"route": route`
    (neither: the default kind, KernelSpec): stored specs of it parse back."""
    SPEC_KINDS[cls.__name__] = cls
    if family:
        FAMILY_KINDS[family] = cls.__name__
    if route:
        ROUTE_KINDS[route] = cls.__name__


def spec_kind(spec) -> str:
    """The registered kind name of `spec` (raises ValueError for an unregistered class)."""
    for kind, cls in SPEC_KINDS.items():
        if type(spec) is cls:
            return kind
    raise ValueError(f"{type(spec).__name__} is not a registered spec kind ({', '.join(SPEC_KINDS)})")


def kind_of_canonical(text: str) -> str:
    """The kind whose canonical form `text` is, read from its "family" field (GemvSpec) or its
    "route" field (KernelSpec when it has neither). Raises ValueError for text that is not a JSON
    object or names an unknown route."""
    try:
        d = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a spec: {exc}") from None
    if not isinstance(d, dict):
        raise ValueError(f"not a spec: {text[:120]!r}")
    family = d.get("family")
    if family is not None:
        if family not in FAMILY_KINDS:
            raise ValueError(f"not a kernel spec: unknown family {family!r}")
        return FAMILY_KINDS[family]
    route = d.get("route")
    if route is None:
        return "KernelSpec"
    if route not in ROUTE_KINDS:
        raise ValueError(f"not a kernel spec: unknown route {route!r}")
    return ROUTE_KINDS[route]


def spec_from_canonical(text: str, kind: str | None = None):
    """The spec of kind `kind` whose canonical() is exactly `text`: the one place stored specs are
    read back. Without `kind`, the kind the text itself names (kind_of_canonical). Raises
    ValueError for an unknown kind, or text that is not that kind's canonical form (unknown or
    missing fields, other values)."""
    if kind is None:
        kind = kind_of_canonical(text)
    cls = SPEC_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown spec kind {kind!r} (known: {', '.join(SPEC_KINDS)})")
    try:
        spec = cls.from_canonical(text)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a {kind}: {exc}") from None
    if spec.canonical() != text:
        raise ValueError(f"not the canonical form of a {kind}: {text[:120]!r}")
    return spec
