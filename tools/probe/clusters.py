"""How many thread-block clusters of each size fit on this GPU at once (cuOccupancyMaxActiveClusters),
for a 256-thread kernel at one block per SM (the decode kernel's shape), by dynamic shared memory.
Prints one line per (cluster size, shared memory). Device-only probe; no jitmarlin code involved."""

import sys

from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

SRC = b'extern "C" __global__ void probe(int* p) { if (p) p[blockIdx.x] = 1; }'


def check(res):
    err = res[0]
    if int(err) != 0:
        raise SystemExit(f"CUDA error {err}")
    return res[1] if len(res) == 2 else res[1:]


def main():
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    major = check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    sms = check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    prog = check(nvrtc.nvrtcCreateProgram(SRC, b"p.cu", 0, [], []))
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(r[0]) != 0:
        raise SystemExit(f"nvrtc: {r}")
    n = check(nvrtc.nvrtcGetCUBINSize(prog))
    cubin = b" " * n
    check(nvrtc.nvrtcGetCUBIN(prog, cubin))
    mod = check(cu.cuModuleLoadData(cubin))
    fn = check(cu.cuModuleGetFunction(mod, b"probe"))
    check(
        cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 227 * 1024)
    )
    check(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
    print(f"device sm_{major}{minor}, {sms} SMs")
    for smem_kb in (100, 150, 200, 227):
        row = []
        for size in (1, 2, 3, 4, 5, 6, 7, 8, 16):
            cfg = cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * 64, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 256, 1, 1
            cfg.sharedMemBytes = smem_kb * 1024
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = size, 1, 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            res = cu.cuOccupancyMaxActiveClusters(fn, cfg)
            row.append(f"{size}:{res[1] if int(res[0]) == 0 else res[0]}")
        print(f"smem {smem_kb} KB  clusters by size  " + "  ".join(row))


if __name__ == "__main__":
    sys.exit(main())
