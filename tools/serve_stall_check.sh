#!/usr/bin/env bash
# Can one request stall `gmlm serve`? With the shipped German-English PaDIR and AR on this
# machine (2 threads, --timeout-s 10), prints: the answer to the largest request --max-rows
# allows (1,024 candidates over 20 passes: refused up front by its price), the answer to a
# heavy request priced under its deadline, the latency of a light AR request sent while the
# heavy one decodes, and how long the process takes to exit after SIGTERM meanwhile.
#   bash tools/serve_stall_check.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-18080}
URL=http://127.0.0.1:$PORT
GMLM=${GMLM:-.venv/bin/gmlm}
LOG=$(mktemp)
OMP_NUM_THREADS=2 $GMLM serve --port "$PORT" --threads 2 --timeout-s 10 \
  --model padir=checkpoints/multi30k-de-en/padir --model ar=checkpoints/multi30k-de-en/ar \
  >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 120); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ready")" = 200 ] && break
  sleep 0.5
done
S="Ein Mann in einem orangefarbenen Hut starrt auf etwas, während zwei Frauen mit roten Taschen die belebte Straße entlang gehen."
post() { curl -s -w ' [%{http_code} in %{time_total} s]' "$URL/v1/translate" -H 'content-type: application/json' -d "$1"; }
echo "largest request: $(post "{\"model\":\"padir\",\"text\":[\"$S\"],\"options\":{\"steps\":20,\"length_beam\":128,\"random_starts\":8,\"prune_after\":0}}")"
HEAVY=$(mktemp)
post "{\"model\":\"padir\",\"text\":[\"$S\"],\"options\":{\"steps\":12,\"length_beam\":64,\"random_starts\":4,\"prune_after\":0}}" >"$HEAVY" &
sleep 1
echo "light AR request meanwhile: $(post '{"model":"ar","text":["Zwei Hunde spielen im Schnee."],"options":{"beam":5}}')"
START=$(date +%s.%N)
kill -TERM $PID
while kill -0 $PID 2>/dev/null; do sleep 0.1; done
echo "exit $(python3 -c "import time; print(f'{time.time() - $START:.1f}')") s after SIGTERM"
wait
echo "heavy request: $(cat "$HEAVY")"
rm -f "$HEAVY"
