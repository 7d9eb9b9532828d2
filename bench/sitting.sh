#!/usr/bin/env bash
# One sitting of the scale benches, before and after: docs/benchmarks.md sections 2 and 3 were taken with it.
#   bench/sitting.sh BEFORE_CHECKOUT [OUT_DIR]
# BEFORE_CHECKOUT: a checkout of the release to compare with (e.g. `git worktree add ../before 641ede5 --detach`,
# with a .venv of its own or a link to this one); this checkout's bench scripts are copied into it, so both sides
# run the same scripts. Each run's whole output (and /usr/bin/time -v) goes to OUT_DIR/<name>.log.
set -u
BEFORE=$(cd "${1:?give the checkout of the release before}" && pwd)
AFTER=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$(mktemp -d)}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
mkdir -p "$OUT"
cp "$AFTER"/bench/{reconcile_scale,admission_scale,watch_cache}.py "$BEFORE/bench/"
db() { psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"; }
run() { # name dir command...
  local name=$1 dir=$2
  shift 2
  echo "=== $name $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.log"
  (cd "$dir" && /usr/bin/time -v "$@") >"$OUT/$name.log" 2>&1
  echo "    exit $? $(date -u +%T)" | tee -a "$OUT/summary.log"
}
for side in after before; do
  dir=$AFTER
  [ $side = before ] && dir=$BEFORE
  db bench_adm_$side
  run adm-pg-$side "$dir" env DATABASE_URL="$PG/bench_adm_$side" .venv/bin/python bench/admission_scale.py
  db bench_rec_$side
  run rec-pg-$side "$dir" env PORTAL_DATA_DIR="$(mktemp -d)" DATABASE_URL="$PG/bench_rec_$side" \
    .venv/bin/python bench/reconcile_scale.py
  run rec-sqlite-$side "$dir" env PORTAL_DATA_DIR="$(mktemp -d)" .venv/bin/python bench/reconcile_scale.py
done
run api-after "$AFTER" .venv/bin/python bench/api_load.py --rate 200 --seconds 60
run api-before "$AFTER" .venv/bin/python bench/api_load.py --rate 200 --seconds 60 --root "$BEFORE"
run watch "$AFTER" .venv/bin/python bench/watch_cache.py --nodes 5000 --workloads 20000 --passes 1
echo "=== done $(date -u +%T); logs in $OUT" | tee -a "$OUT/summary.log"
