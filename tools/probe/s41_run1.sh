# Session 41 device run 1: the wgmma kernel at M = 1024 / 4096 with integer-valued A operands
# (probe subs intw: the group-scale multiply by an opaque 1.0; nosc: no multiply), fp16, four
# layers, ABAB, cuBLAS timed beside each (jm / cuBLAS printed per variant).
source tools/probe/env.sh > /dev/null
( RUN_TIMEOUT=${RUN_TIMEOUT:-110} MS=${MS:-1024,4096} BARGS="--act ${ACTS:-float16} --shapes ${SHAPES:-4096x28672,14336x4096,8192x10240,8192x8192}" \
  VS="${VS:-head= intw=JM_PROBE_SUB=intw nosc=JM_PROBE_SUB=nosc head2= intw2=JM_PROBE_SUB=intw}" \
  bash tools/probe/env_ab.sh ) > /tmp/a.txt 2>&1
cp /tmp/a.txt $OUT/ab.txt; grep -v "^ *$" /tmp/a.txt | tail -12
python3 - "$OUT" ${VS:-head intw nosc head2 intw2} <<'PY'
import json, sys, os
out = sys.argv[1]
for v in sys.argv[2:]:
    v = v.split("=")[0]
    try: rows = json.load(open(os.path.join(out, f"ab-{v}.json")))["rows"]
    except Exception as e: print(v, "no json"); continue
    print(f"{v:6s} " + " ".join(f"{r['shape'][4:]}/{r['M']}:{r['jitmarlin_us']/r['cublas_fp16_us']:.3f}" for r in rows))
PY
rm -f $OUT/ab-*.log
