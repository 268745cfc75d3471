# Session 31: A/B runs of the working tree under probe settings (tools/probe/variant_bench.py),
# e.g. the even gemv plans (branch wip/gemv-even-pair) against the whole-column plan, with and
# without the loop's arithmetic (gv_nocomp). MS, BARGS as in ab_tree.sh; VS a list of
# name=ENV[+ENV...] (e.g. "even= whole=JM_PROBE_GEMV=sp=0 evennc=JM_PROBE_SUB=gv_nocomp").
export CACHE=/tmp/jmc-s31; mkdir -p $CACHE
source tools/probe/env.sh
for v in $VS; do
  tag=${v%%=*}; envs=${v#*=}; t0=$(date +%s)
  env ${envs//+/ } timeout ${RUN_TIMEOUT:-120} python3 tools/probe/variant_bench.py bench --json "$OUT/ab-$tag.json" --m ${MS:-1,8} --peers cublas ${BARGS:-} > "$OUT/ab-$tag.log" 2>&1
  echo "$tag rc=$? $(( $(date +%s)-t0 )) s"
done
tags=(); for v in $VS; do tags+=("${v%%=*}"); done
python3 tools/probe/ab_table.py "$OUT" "${tags[@]}"
