"""The JIT layer: NVRTC compile, the kernel store (cache, cache_entries, store_disk, records,
sources), bundles, module load and launch. It knows no kernel family, no plan rule, no tuner:
the layers above register what it needs (jitmarlin.jit.sources, jitmarlin.jit.records)."""
