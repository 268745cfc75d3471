# variant_env V: the environment (an array `env`, for `env "${env[@]}" cmd`) that makes
# variant_bench.py render source variant V: new = the working tree, head = the templates in
# tools/probe/templates_head, whole_TN_TK_STAGES = variant_bench.py's JM_PROBE_WHOLE, cluster = its
# JM_PROBE_CLUSTER, no_gemv / gemv_fillX / gemv_cb=C_cl=L_w=W_u=U = its JM_PROBE_GEMV, tile_TN_TK_STAGES = its JM_PROBE_TILE, stream_k / fused = its
# JM_PROBE_STREAM_K / JM_PROBE_NO_ROUTE, anything
# else = the substitutions of that name (head+NAME: applied to the head templates; head_wg...: the
# wg... plan on the head templates).
variant_env() {
  case $1 in
    new) env=() ;;
    head) env=(JM_PROBE_TEMPLATES=tools/probe/templates_head) ;;
    cluster) env=(JM_PROBE_CLUSTER=1) ;;                            # cluster decode plans on
    stream_k) env=(JM_PROBE_STREAM_K=1) ;;                         # no whole-tile wgmma plans
    fused) env=(JM_PROBE_NO_ROUTE=1) ;;                             # no dequant + cuBLAS route
    stream_k_fused) env=(JM_PROBE_STREAM_K=1 JM_PROBE_NO_ROUTE=1) ;;
    no_gemv) env=(JM_PROBE_GEMV=off) ;;                             # decode: Stream-K kernel only
    gemv_fill*) env=(JM_PROBE_GEMV=fill=${1#gemv_fill}) ;;         # gemv_fill0.5
    gemv_*) w=${1#gemv_}; env=(JM_PROBE_GEMV=${w//_/,}) ;;        # gemv_cb=1_cl=2_w=8_u=4
    tile_*) w=${1#tile_}; env=(JM_PROBE_TILE=${w//_/,}) ;;      # tile_TN_TK_STAGES, Stream-K
    whole_*) w=${1#whole_}; env=(JM_PROBE_WHOLE=${w//_/,}) ;;   # whole_TN_TK_STAGES
    depth*) env=(JM_PROBE_WGMMA_DEPTH=${1#depth}) ;;                # wgmma stages above 64 rows
    wg*) w=${1#wg}; w=${w/_/:}; env=(JM_PROBE_WGMMA=${w//_/,}) ;;   # wgM_TM_TN_STAGES_OCC
    head+*) env=(JM_PROBE_TEMPLATES=tools/probe/templates_head JM_PROBE_SUB=${1#head+}) ;;  # head + subs
    head_wg*) variant_env ${1#head_}; env=(JM_PROBE_TEMPLATES=tools/probe/templates_head "${env[@]}") ;;
    *) env=(JM_PROBE_SUB=$1) ;;
  esac
}
