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
python3 - "$OUT" $VS <<'PY'
import json, sys, os
out, vs = sys.argv[1], [v.split("=")[0] for v in sys.argv[2:]]
runs = {}
for v in vs:
    try: runs[v] = {(r["shape"], r["M"], r["act"]): r for r in json.load(open(os.path.join(out, f"ab-{v}.json")))["rows"]}
    except Exception as e: print(v, "no json", e)
keys = sorted({k for r in runs.values() for k in r}, key=lambda k: (k[2], k[1], k[0]))
print(f"{'shape':16s} {'M':>4s} act  " + " ".join(f"{v[:8]:>8s}" for v in runs) + "  kernels")
for k in keys:
    rows = [runs[v].get(k) for v in runs]
    ks = []
    for r in rows:
        n = (r or {}).get("kernel", "-").replace("jm_gemv_sm80_uint4b8_", "")
        if n not in ks: ks.append(n)
    print(f"{k[0]:16s} {k[1]:4d} {k[2][:4]} " + " ".join(f"{r['jitmarlin_us']:8.2f}" if r else " "*8 for r in rows) + "  " + " ".join(ks))
PY
