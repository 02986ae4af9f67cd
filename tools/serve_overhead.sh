#!/bin/bash
# The experiment of docs/history/multi30k-de-en-notes.md "The overhead and the refusals once more": the shipped PaDIR
# served three ways (unchanged; Python's GIL switch interval at 0.5 ms; libgomp not spinning),
# each at 1 request/s for 30 s, then with the `make serve-overload` server at 1/s and 32/s for
# 15 s each, ROUNDS times. Run from the repository root on an otherwise idle machine:
#   bash tools/serve_overhead.sh [OUT_DIR]        (MULTI30K=DIR for the test set, PORT=N)
# Each run writes OUT_DIR/NAME-{light,over}.{json,md}; the overhead is p50_ms minus
# server_batch_ms_p50, the refusals' p99 refused_p99_ms.
set -eu
OUT=${1:-runs/serve-overhead}
PY=${PY:-.venv/bin/python}
MULTI30K=${MULTI30K:-../shared/data/multi30k}
PORT=${PORT:-8091}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
run_variant() {
  local name=$1 interval=$2; shift 2
  for mode in light over; do
    if [ "$mode" = light ]; then extra=""; rates=1; duration=30
    else extra="--max-queue-sentences 16 --max-batch-sentences 16 --timeout-s 2"; rates=1,32; duration=15; fi
    env "$@" "$PY" -c "import sys; sys.setswitchinterval($interval); from gmlm.cli.main import main; \
sys.exit(main(['serve', '--port', '$PORT', '--threads', '2', \
'--model', 'padir=checkpoints/multi30k-de-en/padir'] + '$extra'.split()))" > "$OUT/$name-$mode.serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 240); do curl -sf "http://127.0.0.1:$PORT/ready" > /dev/null && break; sleep 0.5; done
    "$PY" -m gmlm loadtest --url "http://127.0.0.1:$PORT" --model padir \
      --input "$MULTI30K/test_2016_flickr.de.gz" --rates "$rates" --duration "$duration" \
      --output "$OUT/$name-$mode.json" --markdown "$OUT/$name-$mode.md"
    kill -TERM "$pid"; wait "$pid" || true
  done
}
for round in $(seq "$ROUNDS"); do
  run_variant "unchanged$round" 0.005 GMLM_VARIANT=unchanged
  run_variant "switch$round" 0.0005 GMLM_VARIANT=switch
  run_variant "nospin$round" 0.005 GOMP_SPINCOUNT=0
done
