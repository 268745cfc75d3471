// ---- emulator entry point (CPU builds only) ------------------------------------------------------
// bufs: A, B, S, bias (may be null), C, partials, locks; bytes: their sizes for bounds checks.
extern "C" int jm_emu_launch(int grid, int smem_bytes, void* const* bufs, const long long* bytes,
                             int M, int N, int K, int lda, int iters, unsigned seed, char* err,
                             int errlen) {
  emu::Runtime rt;
  static const char* names[7] = {"A", "B", "S", "bias", "C", "partials", "locks"};
  for (int i = 0; i < 7; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i]});
  rt.entry = [&] {
    {{ spec.name }}(static_cast<const int4*>(bufs[0]), static_cast<const int4*>(bufs[1]),
                    static_cast<const int4*>(bufs[2]), static_cast<const u32*>(bufs[3]),
                    static_cast<u32*>(bufs[4]), static_cast<float4*>(bufs[5]),
                    static_cast<int*>(bufs[6]), M, N, K, lda, iters);
  };
  return emu::run(rt, grid, {{ spec.threads }}, smem_bytes, seed, err, errlen);
}
