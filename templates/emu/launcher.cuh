// ---- emulator entry point (CPU builds only) ------------------------------------------------------
// bufs: A, B, S, Z, bias, C, partials, locks (Z and bias may be null); bytes: their sizes, for
// bounds checks. dims: M, N, K, n_out, k_in, lda, iters. A kernel built for programmatic dependent
// launch (spec.pdl) must execute griddepcontrol.wait in every thread before it touches A, bias, C
// or the workspace: the grid ahead of it may still be writing or reading them.
extern "C" int jm_emu_launch(int grid, int smem_bytes, void* const* bufs, const long long* bytes,
                             const int* dims, float gscale, unsigned seed, char* err, int errlen) {
  emu::Runtime rt;
  rt.cluster = {{ 1 if (spec.pair is defined and spec.pair) else spec.cluster }};   // pair plans: plain blocks
  static const char* names[8] = {"A", "B", "S", "Z", "bias", "C", "partials", "locks"};
  for (int i = 0; i < 8; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i],
                                       {{ "true" if spec.pdl else "false" }} && (i == 0 || i >= 4)});   // PDL: all but B, S, Z
//% if spec.bulk is defined and spec.bulk
  // the packed weights' map (launch.weight_tensor_maps): K/16 rows of N * bits/4 8-byte words,
  // boxes of one tile's words x its k16 rows
  const long long words = (long long)dims[1] * {{ bits }} / 4;
  const TmaMap bmap{static_cast<const unsigned char*>(bufs[1]), words, dims[2] / 16, words * 8,
                    {{ spec.tile_n * bits // 4 }}, {{ spec.tk }}, 8};
//% endif
//% if spec.xbox is defined and spec.xbox
  // x's map (launch.x_tensor_map): M rows of k_in halves, lda apart, boxes of 64 x 16, 128-byte swizzle
  const TmaMap xmap{static_cast<const unsigned char*>(bufs[0]), dims[4], dims[0], (long long)dims[5] * 2,
                    64, 16, 2, true};
//% endif
  rt.entry = [&] {
    {{ spec.name }}(static_cast<const int4*>(bufs[0]), static_cast<const int4*>(bufs[1]),
                    static_cast<const int4*>(bufs[2]), static_cast<const int4*>(bufs[3]),
                    static_cast<const u32*>(bufs[4]), static_cast<u32*>(bufs[5]), gscale,
                    static_cast<float4*>(bufs[6]), static_cast<int*>(bufs[7]), dims[0], dims[1],
                    dims[2], dims[3], dims[4], dims[5], dims[6]{{ ", bmap" if (spec.bulk is defined and spec.bulk) else "" }}{{ ", xmap" if (spec.xbox is defined and spec.xbox) else "" }});
  };
  return emu::run(rt, grid, {{ spec.threads }}, smem_bytes, seed, err, errlen);
}
