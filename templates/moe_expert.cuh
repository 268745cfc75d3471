// The local expert of routed pair p, or -1 (an id outside expert_map or the experts, or mapped to
// -1: not on this GPU). One definition for the alignment, the combine and the direct GEMV kernels,
// which must skip the same pairs. Needs ld_i32.
JM_DEV int local_expert(const int* ids, const int* expert_map, int p, int n_global, int n_local) {
  const int g = ld_i32(ids + p);
  if (expert_map) {
    if (g < 0 || g >= n_global) return -1;
    const int e = ld_i32(expert_map + g);
    return e >= 0 && e < n_local ? e : -1;
  }
  return g >= 0 && g < n_local ? g : -1;
}
