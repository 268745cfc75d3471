// ---- emulator entry point of a grouped MoE GEMM (CPU builds only) --------------------------------
// bufs: A, B, S, Z, bias, gscales, topk_w, sorted, blk_expert, n_rows, C (Z, bias, topk_w may be
// null), Cp (fp32 split partials, or null); bytes: their sizes, for bounds checks. dims: num_pairs,
// topk, N, K, n_out, k_in, lda, splits.
//% set direct = spec.direct is defined and spec.direct
//% if direct
// Direct (MoEGemvSpec.direct): bufs 12, 13 ids and expert_map (null where none), dims 8, 9
// n_global and n_local.
//% endif
extern "C" int jm_emu_moe(int grid, int smem_bytes, void* const* bufs, const long long* bytes,
                          const int* dims, unsigned seed, char* err, int errlen) {
  emu::Runtime rt;
  static const char* names[{{ 14 if direct else 12 }}] = {"A", "B", "S", "Z", "bias", "gscales", "topk_w", "sorted",
                                  "blk_expert", "n_rows", "C", "Cp"{{ ", \"ids\", \"expert_map\"" if direct else "" }}};
  for (int i = 0; i < {{ 14 if direct else 12 }}; ++i)
    if (bufs[i])
      rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                       static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i],
                                       {{ "true" if (spec.pdl is defined and spec.pdl and not spec.gated) else "false" }} && (i == 0 || i == 10 || i == 11)});   // PDL w2: H, Y, Cp after the wait
//% set wg = spec.wgmma is defined and spec.wgmma
//% if wg
  // The wgmma kind's tensor maps (kernels/moe/wgmma.py weight_maps, and A's map in ops/moe.py):
  // dims[8] = experts, dims[9] = rows of A (sorted_x's x copy, sorted_h's H: the aligned list's
  // padded rows).
  const int experts = dims[8], a_rows = dims[9], N = dims[2], K = dims[3];
  const long long words = (long long)N * {{ spec.bits }} / 4;
  const TmaMap bmap{static_cast<const unsigned char*>(bufs[1]), words, (long long)experts * K / 16, words * 8,
                    {{ spec.tile_n * spec.bits // 4 }}, 4, 8};
//% set sgroups = spec.group_blocks
  const long long s_rows = {{ "0" if sgroups < 0 else ("experts" if sgroups == 0 else "(long long)experts * K / (16 * " ~ sgroups ~ ")") }};
  const int box_rows = {{ 0 if sgroups < 0 else (1 if (sgroups == 0 or sgroups >= 4) else 4 // sgroups) }};
  const TmaMap smap = s_rows && bufs[2] ? TmaMap{static_cast<const unsigned char*>(bufs[2]), N, s_rows, (long long)N * 2,
                                                 {{ spec.tile_n }}, box_rows, 2} : TmaMap{};
  const TmaMap zmap = s_rows && bufs[3] ? TmaMap{static_cast<const unsigned char*>(bufs[3]), N, s_rows, (long long)N * 2,
                                                 {{ spec.tile_n }}, box_rows, 2} : TmaMap{};
  const TmaMap amap{static_cast<const unsigned char*>(bufs[0]), dims[5], a_rows, (long long)dims[6] * 2, 64,
                    {{ spec.tile_m }}, 2, true};
  (void)amap;
//% endif
  rt.entry = [&] {
    {{ spec.name }}(static_cast<const int4*>(bufs[0]), static_cast<const int4*>(bufs[1]),
                    static_cast<const int4*>(bufs[2]), static_cast<const int4*>(bufs[3]),
                    static_cast<const float*>(bufs[4]), static_cast<const float*>(bufs[5]),
                    static_cast<const float*>(bufs[6]), static_cast<const int*>(bufs[7]),
                    static_cast<const int*>(bufs[8]), static_cast<const int*>(bufs[9]),
                    static_cast<u32*>(bufs[10]), dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                    dims[6], static_cast<float*>(bufs[11]), dims[7]{{ ",
                    static_cast<const int*>(bufs[12]), static_cast<const int*>(bufs[13]), dims[8], dims[9]"
                    if direct else "" }}{{ ", bmap, smap, zmap" if wg else "" }}{{ ", amap" if (wg and spec.tma_x) else "" }});
  };
  return emu::run(rt, grid, {{ spec.threads }}, smem_bytes, seed, err, errlen);
}
//% if spec.act_kernel
// jm_emu_moe_act: bufs Cp, H; dims num_pairs, N, n_out, splits.
extern "C" int jm_emu_moe_act(int grid, void* const* bufs, const long long* bytes, const int* dims,
                              unsigned seed, char* err, int errlen) {
  emu::Runtime rt;
  static const char* names[2] = {"Cp", "H"};
  for (int i = 0; i < 2; ++i)
    rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                     static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i]});
  rt.entry = [&] {
    {{ spec.name }}_act(static_cast<const float*>(bufs[0]), static_cast<u32*>(bufs[1]), dims[0], dims[1], dims[2],
                        dims[3]);
  };
  return emu::run(rt, grid, {{ spec.threads }}, 0, seed, err, errlen);
}
//% endif
//% if spec.gated and spec.sorted_x is defined and spec.sorted_x
// jm_emu_moe_permute: bufs x, sorted, n_rows, Xs; dims num_pairs, topk, k_in, lda.
extern "C" int jm_emu_moe_permute(int grid, void* const* bufs, const long long* bytes, const int* dims,
                                  unsigned seed, char* err, int errlen) {
  emu::Runtime rt;
  static const char* names[4] = {"x", "sorted", "n_rows", "Xs"};
  for (int i = 0; i < 4; ++i)
    rt.buffers.push_back(emu::Buffer{static_cast<const unsigned char*>(bufs[i]),
                                     static_cast<const unsigned char*>(bufs[i]) + bytes[i], names[i]});
  rt.entry = [&] {
    {{ spec.name }}_permute(static_cast<const int4*>(bufs[0]), static_cast<const int*>(bufs[1]),
                            static_cast<const int*>(bufs[2]), dims[0], dims[1], dims[2], dims[3],
                            static_cast<int4*>(bufs[3]));
  };
  return emu::run(rt, grid, {{ spec.threads }}, 0, seed, err, errlen);
}
//% endif
