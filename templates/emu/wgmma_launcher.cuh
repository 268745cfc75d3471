// ---- emulator entry point of the wgmma kernel (CPU builds only) ---------------------------------
// As emu/launcher.cuh, with the tensor maps launch.py builds (x_tensor_map, weight_tensor_maps):
// dims: M, N, K, n_out, k_in, lda, iters, whole, x_tail.
extern "C" int jm_emu_launch(int grid, int smem_bytes, void* const* bufs, const long long* bytes,
                             const int* dims, float gscale, unsigned seed, char* err, int errlen) {
  emu::Runtime rt;
  rt.cluster = {{ spec.cluster }};
  static const char* names[8] = {"A", "B", "S", "Z", "bias", "C", "partials", "locks"};
  for (int i = 0; i < 8; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i],
                                       {{ "true" if spec.pdl else "false" }} && (i == 0 || i >= 4)});
  const int M = dims[0], N = dims[1], K = dims[2], k_in = dims[4], lda = dims[5], x_tail = dims[8];
  const auto* a = static_cast<const unsigned char*>(bufs[0]);
  // x: M rows of k_in halves, lda apart, boxes of 64 x rows, 128-byte swizzle (x_tensor_map)
  const TmaMap xmap{a, k_in, M, (long long)lda * 2, 64, {{ spec.tile_m }}, 2, true};
  const TmaMap xtail{a, k_in, M, (long long)lda * 2, 64, x_tail > 0 ? x_tail : {{ spec.tile_m }}, 2, true};
  // B: K/16 rows of N bits/4 8-byte words, boxes of one tile's words x 4 rows (where <= 256 words)
  const long long words = (long long)N * {{ bits }} / 4;
  const TmaMap bmap = {{ spec.tile_n * bits // 4 }} <= 256
      ? TmaMap{static_cast<const unsigned char*>(bufs[1]), words, K / 16, words * 8, {{ spec.tile_n * bits // 4 }}, 4, 8}
      : TmaMap{};
  // S, Z: rows of N halves (one a group, or one), boxes of the tile's features x a K step's rows
//% set sgroups = spec.group_blocks
  const int s_rows = {{ "0" if sgroups < 0 else ("1" if sgroups == 0 else "K / (16 * " ~ sgroups ~ ")") }};
  const int box_rows = {{ 0 if sgroups < 0 else (1 if (sgroups == 0 or sgroups >= 4) else 4 // sgroups) }};
  const TmaMap smap = s_rows && bufs[2] ? TmaMap{static_cast<const unsigned char*>(bufs[2]), N, s_rows, (long long)N * 2,
                                                 {{ spec.tile_n }}, box_rows, 2} : TmaMap{};
  const TmaMap zmap = s_rows && bufs[3] ? TmaMap{static_cast<const unsigned char*>(bufs[3]), N, s_rows, (long long)N * 2,
                                                 {{ spec.tile_n }}, box_rows, 2} : TmaMap{};
  (void)x_tail; (void)xtail;
  rt.entry = [&] {
    {{ spec.name }}(static_cast<const int4*>(bufs[0]), static_cast<const int4*>(bufs[1]),
                    static_cast<const int4*>(bufs[2]), static_cast<const int4*>(bufs[3]),
                    static_cast<const u32*>(bufs[4]), static_cast<u32*>(bufs[5]), gscale,
                    static_cast<float4*>(bufs[6]), static_cast<int*>(bufs[7]), M, N, K, dims[3], k_in, lda,
                    dims[6], dims[7]{{ ", x_tail, xtail" if spec.tail else "" }}, xmap, bmap, smap, zmap);
  };
  return emu::run(rt, grid, {{ spec.threads }}, smem_bytes, seed, err, errlen);
}
