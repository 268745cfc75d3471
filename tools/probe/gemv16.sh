# Where the 16-row gemv kernel's time goes (timing probes; M = 16, fp16): for each variant, tools/bench
# through variant_bench.py on the layers of SHAPES. VS lists NAME:GEMV:SUB triples (GEMV = a
# JM_PROBE_GEMV value with ';' for ',', SUB = a JM_PROBE_SUB name; either may be empty), with an
# optional fourth field h: the earlier tree of tools/probe/head_tree (its variant_bench.py copied
# to head_tree/tools/probe) instead of the working tree.
source tools/probe/env.sh 2>/dev/null
SHAPES=${SHAPES:-all}
for v in $VS; do
  IFS=: read -r name gemv sub tree <<< "$v"
  vb=tools/probe/variant_bench.py; [ "$tree" = h ] && vb=tools/probe/head_tree/tools/probe/variant_bench.py
  t0=$(date +%s)
  env ${gemv:+JM_PROBE_GEMV=${gemv//;/,}} ${sub:+JM_PROBE_SUB=$sub} timeout 150 python3 $vb bench \
    --json "$OUT/g16-$name.json" --m ${MS:-16} --act float16 --peers cublas --shapes "$SHAPES" > "$OUT/g16-$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"
done
python3 - "$OUT" $VS <<'PY'
import json, sys, os
out, vs = sys.argv[1], [v.split(":")[0] for v in sys.argv[2:]]
runs = {}
for v in vs:
    try: runs[v] = {(r["shape"], r["M"]): r for r in json.load(open(os.path.join(out, f"g16-{v}.json")))["rows"]}
    except Exception as e: print(v, "no json", e)
for k in sorted({k for r in runs.values() for k in r}):
    print(f"{k[0]:16s} M={k[1]:<3d} " + "  ".join(f"{v}={r[k]['jitmarlin_us']:.2f} ({r[k]['kernel'].split('g128_')[-1]})" for v, r in runs.items() if k in r))
PY
