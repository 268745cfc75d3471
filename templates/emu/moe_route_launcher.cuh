// ---- emulator entry points of the MoE routing module (CPU builds only) ---------------------------
// jm_emu_align: bufs ids, expert_map, sorted, blk_expert, n_rows (expert_map may be null); dims
// num_pairs, n_global, n_local, max_blocks. jm_emu_combine: bufs Y, ids, expert_map, out; dims
// n_global, n_local, T, topk, hidden.
static int jm_emu_route_run(int grid, int smem_bytes, void* const* bufs, const long long* bytes,
                            const char* const* names, int nbufs, const std::function<void()>& entry,
                            unsigned seed, char* err, int errlen, unsigned after_wait = 0) {
  emu::Runtime rt;
  for (int i = 0; i < nbufs; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i],
                                       ((after_wait >> i) & 1u) != 0});
  rt.entry = entry;
  return emu::run(rt, grid, {{ spec.threads }}, smem_bytes, seed, err, errlen);
}

extern "C" int jm_emu_align(void* const* bufs, const long long* bytes, const int* dims, unsigned seed,
                            char* err, int errlen) {
  static const char* names[5] = {"ids", "expert_map", "sorted", "blk_expert", "n_rows"};
  return jm_emu_route_run(1, 2 * {{ spec.threads }} * 4, bufs, bytes, names, 5, [&] {
    {{ spec.name }}(static_cast<const int*>(bufs[0]), static_cast<const int*>(bufs[1]), dims[0], dims[1],
                    dims[2], dims[3], static_cast<int*>(bufs[2]), static_cast<int*>(bufs[3]),
                    static_cast<int*>(bufs[4]));
  }, seed, err, errlen);
}

extern "C" int jm_emu_combine(int grid, void* const* bufs, const long long* bytes, const int* dims,
                              unsigned seed, char* err, int errlen) {
  static const char* names[5] = {"Y", "ids", "expert_map", "out", "Yp"};
  return jm_emu_route_run(grid, 0, bufs, bytes, names, 5, [&] {
    {{ spec.combine_name }}(static_cast<const int4*>(bufs[0]), static_cast<const int*>(bufs[1]),
                            static_cast<const int*>(bufs[2]), dims[0], dims[1], dims[2], dims[3], dims[4],
                            static_cast<int4*>(bufs[3]), static_cast<const float4*>(bufs[4]), dims[5]);
  }, seed, err, errlen, {{ "0x19u" if spec.pdl else "0u" }});   // PDL: Y, out, Yp after the wait
}
