// ---- emulator entry points of the dequantisation module (CPU builds only) -----------------------
// jm_emu_dequant: bufs B, S, Z, W (Z may be null), bytes their sizes (bounds checks), dims N, K.
// jm_emu_bias: bufs bias, C; dims M, n_out.
static int jm_emu_run(int grid, void* const* bufs, const long long* bytes, const char* const* names,
                      int nbufs, const std::function<void()>& entry, unsigned seed, char* err,
                      int errlen) {
  emu::Runtime rt;
  for (int i = 0; i < nbufs; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i]});
  rt.entry = entry;
  return emu::run(rt, grid, {{ spec.threads }}, 0, seed, err, errlen);
}

extern "C" int jm_emu_dequant(int grid, void* const* bufs, const long long* bytes, const int* dims,
                              unsigned seed, char* err, int errlen) {
  static const char* names[4] = {"B", "S", "Z", "W"};
  return jm_emu_run(grid, bufs, bytes, names, 4, [&] {
    {{ spec.name }}(static_cast<const int4*>(bufs[0]), static_cast<const u16*>(bufs[1]),
                    static_cast<const u16*>(bufs[2]), static_cast<int4*>(bufs[3]), dims[0], dims[1]);
  }, seed, err, errlen);
}

extern "C" int jm_emu_bias(int grid, void* const* bufs, const long long* bytes, const int* dims,
                           unsigned seed, char* err, int errlen) {
  static const char* names[2] = {"bias", "C"};
  return jm_emu_run(grid, bufs, bytes, names, 2, [&] {
    {{ spec.name }}_bias(static_cast<const u32*>(bufs[0]), static_cast<u32*>(bufs[1]), dims[0], dims[1]);
  }, seed, err, errlen);
}
