"""Cache keys, spec canonical forms, rendered sources and tuned-choice keys are those computed on
main before the package was split into layers (issue #58): the move changed no key."""

import pytest

from jitmarlin.jit.cache import key_inputs, key_of, source_digest
from jitmarlin.jit.profiles import get_profile
from jitmarlin.kernels import planner
from jitmarlin.kernels.problem import Problem
from jitmarlin.kernels.render import render, templates_digest
from jitmarlin.kernels.spec import spec_from_canonical, spec_kind
from jitmarlin.service.tune import tune_key

# templates_digest() when the values below were computed: the rendered sources' digests are
# compared only while the templates are those (a template edit changes them, as it should).
TEMPLATES = "158634f9b37580289f7bf19488c446dab0d1e79bfeec508b3dc829e0b7c8dd65"

# (profile, problem, kind, canonical, source sha256, key (sm_90, NVRTC 12.9, 0.0.test), key of a fixed source)
CASES = [
    (
        "h100",
        Problem(1, 4096, 4096, "float16", "uint4b8", 128),
        "GemvSpec",
        '{"act":"float16","cluster":2,"family":"gemv","group_blocks":8,"kwarps":16,"max_m":8,"occupancy":1,'
        '"pair":true,"path":"sm80","qtype":"uint4b8","spread":false,"unroll":4,"warps":16}',
        "9c5d398a739d3c5b724103d3810183c648fd68a3c5b92439ac13e9eb9bd7211a",
        "59d7ec821bb895a7a8614e123d73a6eb80f089e8c524e1d0fb5e1851add4fc4f",
        "3d513e924a6b8c2eaf3c5ccaddcfde5e3729bd69cee1a8d41678713468012146",
    ),
    (
        "h100",
        Problem(64, 4096, 4096, "bfloat16", "uint4", 128),
        "KernelSpec",
        '{"act":"bfloat16","group_blocks":8,"occupancy":1,"path":"sm90","qtype":"uint4","stages":8,"threads":256,'
        '"tk":4,"tm":4,"tn":8}',
        "3ba617851aaa508082130f63d60914c33ff4207172bf83649a08932b811e04ab",
        "8713ceb5d5ea8748eb4ff3597cd69bc159517b5ad659e5ece7d8848c172016b3",
        "a3b990cdebfffedef8629f3662423eccf9acfe7c66ad1fc6b3343bf1a3308eda",
    ),
    (
        "a100",
        Problem(16, 4096, 11008, "float16", "float8_e4m3fn", -1),
        "KernelSpec",
        '{"act":"float16","group_blocks":-1,"occupancy":1,"path":"sm80","qtype":"float8_e4m3fn","stages":2,'
        '"threads":256,"tk":16,"tm":1,"tn":16}',
        "6b519b66bae0be34f86ba22bd51af4fe3e7f46326bc61c6170bb6bd34e5838b1",
        "26796529800a1a4702fc98923388a20d25d65c482b759e24c29a7a2e31526ff6",
        "da0fd7d0490b49a0e2fa62645a46916f2dff23a79f31ddf66324e0ba4d832065",
    ),
    (
        "t4",
        Problem(32, 4096, 4096, "float16", "uint8b128", 128),
        "KernelSpec",
        '{"act":"float16","group_blocks":8,"occupancy":1,"path":"sm75","qtype":"uint8b128","stages":2,'
        '"threads":256,"tk":8,"tm":2,"tn":8}',
        "86858364fb151d22a98021ec0397332b7112cb6f5447ed0a03edee6b10b6ebdc",
        "8ecd2d48e8d6246cede73c669bfdc86fe187bbacb4f0d66dabe4b9758d5a043a",
        "1b003f924561c1882352bee51fc8e4d1515cc08bc1d4a717f97ee8797f0cbd61",
    ),
    (
        "h100-dequant",
        Problem(4096, 4096, 4096, "float16", "uint4b8", 128),
        "DequantSpec",
        '{"act":"float16","group_blocks":8,"path":"sm80","qtype":"uint4b8","route":"dequant","threads":256}',
        "6d150086ce1f80558bd460b84cd38969d84e53658577c085b38addca94a88bb3",
        "7be3b2725c0b43c747b62a33f7f29df597e5bac7676fce360a095311799c854f",
        "d1ad52f990bf8fe097d7f5c46267977b60f1f3228b018fae836e205eacac8a4b",
    ),
    (
        "h100-fused",
        Problem(256, 8192, 8192, "bfloat16", "nvfp4", 16),
        "KernelSpec",
        '{"act":"bfloat16","cluster":2,"group_blocks":1,"occupancy":1,"path":"sm90","qtype":"nvfp4","stages":4,'
        '"threads":256,"tk":4,"tm":16,"tn":8}',
        "f772d253f4359896333c7032a164a032bd1ed5fa4f606ad117a5a29a8e5ed154",
        "666a92fd50c99ab58cbb4c70cfd78ab1becba860f59551b26a1004774fa76ebc",
        "da3ea701c0bfc0451d74e460870c2660c1916cf43bbb58be2534d6bc8b2d88b6",
    ),
    (
        "v100",
        Problem(8, 4096, 4096, "float16", "uint4b8", 128),
        "KernelSpec",
        '{"act":"float16","group_blocks":8,"occupancy":1,"path":"sm70","qtype":"uint4b8","stages":2,'
        '"threads":256,"tk":8,"tm":1,"tn":8}',
        "f31c5b880d5bd63e5f93e04eddb681d3294f08e7330667ef6a452747a19a074f",
        "6379c97725bc0ec455c17f1c062b506e101f87bdd5f053678fca9e41dc0f35e2",
        "425be46a4fbdb9203f63d63ac4fbabd551cbcc5a1827fefdf213bfcd8874b2a5",
    ),
]


def _spec(name, p):
    prof = get_profile(name.split("-")[0])
    if name.endswith("-dequant"):
        return planner.dequant_spec(prof, p)
    if name.endswith("-fused"):
        return planner.choose_fused_spec(prof, p)
    return planner.plan(prof, p).spec


@pytest.mark.parametrize("case", CASES, ids=[c[0] + "-" + c[1].qtype for c in CASES])
def test_planned_spec_and_key_unchanged(case):
    name, p, kind, canonical, src_sha, key, fixed_key = case
    spec = _spec(name, p).kernel_spec()
    assert spec_kind(spec) == kind
    assert spec.canonical() == canonical
    assert spec_from_canonical(canonical, kind) == spec
    inputs = key_inputs(canonical, "0" * 64, "sm_80", (13, 0), ("-O3",), version="1.2.3")
    assert key_of(inputs) == fixed_key
    if templates_digest() != TEMPLATES:
        pytest.skip("templates changed since the rendered-source digests were recorded")
    source = render(spec)
    assert source_digest(source) == src_sha
    inputs = key_inputs(canonical, src_sha, "sm_90", (12, 9), ("--std=c++17", "-lineinfo"), version="0.0.test")
    assert key_of(inputs) == key


def test_tuned_choice_key_format_unchanged():
    p = Problem(100, 4096, 4096, "float16", "uint4b8", 128)
    assert (
        tune_key("NVIDIA H100 80GB HBM3", "sm_90a", p, version="0.9", templates="abcd")
        == "tune:NVIDIA H100 80GB HBM3|sm_90a|uint4b8|float16|g128|n4096|k4096|m128|0.9|abcd"
    )
