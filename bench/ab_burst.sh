#!/bin/bash
# Same-hour A/B of node CPU per execution: the same burst, alternating between source trees.
#
#   ROUNDS=3 TASKS=5000 URL=postgresql://postgres@127.0.0.1:5432/bench bench/ab_burst.sh \
#       before=/path/to/worktree-at-commit-A after=/path/to/worktree-at-commit-B
#
# Each round runs bench/burst.py once per tree (--reset: it clears the scheduler tables of URL),
# with that tree first on PYTHONPATH and this checkout's .venv. Prints one line per run:
#   label  cpu_ms_per_execution  probe_M_iterations_per_s  statements_per_execution  starts_per_s  duplicates  missed
# On a shared host the figures move from run to run (bench/PROFILE.md): compare the trees
# round by round, and run several rounds.
set -euo pipefail
if [ $# -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
PY="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
URL=${URL:-postgresql://postgres@127.0.0.1:5432/bench}
for round in $(seq "${ROUNDS:-2}"); do
  for pair in "$@"; do
    label=${pair%%=*}; tree=${pair#*=}
    out=$(cd "$tree" && PYTHONPATH="$tree" "$PY" bench/burst.py --url "$URL" --reset --tasks "${TASKS:-5000}" \
          --ceiling-s 1 --json 2>&1 | grep '^{' | tail -1)
    echo "$label $(echo "$out" | "$PY" -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d.get("cpu_ms_per_execution"), d["machine"]["python_mips"], d.get("statements_per_execution"), d.get("starts_per_s"), d.get("duplicates"), d.get("missed"))')"
  done
done
