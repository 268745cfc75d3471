#!/usr/bin/env bash
# Two passes of tools/probe/ab.sh over the same variants, the second in reverse order (the
# session noise shows as the spread between passes); JSONs copied to $OUT as PASS-ab-VARIANT.json.
set -u
FINAL=$OUT
for pass in a b; do
  if [ $pass = a ]; then V="$VARIANTS"; else V=$(echo $VARIANTS | tr " " "\n" | tac | tr "\n" " "); fi
  OUT=/tmp/ab_$pass CACHE=${CACHE:-.jmcache} VARIANTS="$V" BENCH_ARGS="${BA:---m 64,256,1024,4096 --peers cublas}" bash tools/probe/ab.sh
  for f in /tmp/ab_$pass/ab-*.json; do b=$(basename $f .json); cp $f $FINAL/${pass}-${b//+/_}.json; done
done
