#!/bin/bash
# Same-hour A/B of boundary lateness: the same steady run, alternating between source trees.
#
#   ROUNDS=3 TASKS=1000 MINUTES=2 CONCURRENCY=8 bench/ab_steady.sh \
#       before=/path/to/worktree-at-commit-A after=/path/to/worktree-at-commit-B
#
# Each round runs bench/steady.py once per tree on a fresh PostgreSQL database (--backend
# postgresql, no ceiling measurement), with that tree first on PYTHONPATH and this checkout's
# .venv. Prints one line per run:
#   label  concurrency  lateness_p50  p99  max  node_cpu_ms/execution  db_cpu_ms/execution  least_node_share_%
#   p50/floor  p99/floor  (the last two: a tree whose steady.py measures the start floor, else None)
# The figures move from run to run on a shared host (bench/PROFILE.md): compare the trees round
# by round, and run several rounds.
set -euo pipefail
if [ $# -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
PY="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
for round in $(seq "${ROUNDS:-2}"); do
  for pair in "$@"; do
    label=${pair%%=*}; tree=${pair#*=}
    out=$(cd "$tree" && PYTHONPATH="$tree" "$PY" bench/steady.py --backend postgresql --tasks "${TASKS:-1000}" \
          --minutes "${MINUTES:-2}" --concurrency "${CONCURRENCY:-6}" --ceiling-s 0 --json 2>&1 | grep '^{' | tail -1)
    echo "$label ${CONCURRENCY:-6} $(echo "$out" | "$PY" -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["lateness_p50_ms"], d["lateness_p99_ms"], d["lateness_max_ms"], d.get("cpu_ms_per_execution"), d.get("db_cpu_ms_per_execution"), d.get("min_node_share_pct"), d.get("p50_over_floor"), d.get("p99_over_floor"))')"
  done
done
