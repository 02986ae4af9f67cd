#!/bin/bash
# The training ablation's variants scored on the whole validation split (docs/history/multi30k-de-en-notes.md,
# "The training ablation"): the `multi30k-ablation` reproduction's PaDIR run and each variant
# under train_ablation/, their `last` checkpoints (all at the same step, checked), translated in
# fp32 with the validation's decoding (the run's `valid_steps` refinement steps, 5 lengths, the
# class defaults), then scored by the `sacrebleu` command with paired bootstrap resampling
# against the PaDIR run.
# The training's own check decodes only the first 200 pairs (about +-1 BLEU between checkpoints).
#   bash tools/ablation_full_val.sh RUN_DIR OUT_DIR     (PY=python, THREADS=1)
# OUT_DIR must not exist yet (nothing is overwritten); it gets one .hyp per model,
# paired-bs.json (sacrebleu's JSON) and steps.txt.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: bash tools/ablation_full_val.sh RUN_DIR OUT_DIR" >&2; exit 2
fi
RUN=$1
OUT=$2
PY=${PY:-.venv/bin/python}
THREADS=${THREADS:-1}
SRC="$RUN/data/valid.src.txt"
REF="$RUN/data/valid.tgt.txt"
for f in "$SRC" "$REF" "$RUN/padir/last/meta.json"; do
  [ -f "$f" ] || { echo "error: $f is missing: is $RUN a multi30k-ablation reproduction?" >&2; exit 1; }
done
[ -d "$RUN/train_ablation" ] || { echo "error: $RUN/train_ablation is missing: no variant trained yet" >&2; exit 1; }
[ -e "$OUT" ] && { echo "error: $OUT exists: give a new folder (nothing is overwritten)" >&2; exit 1; }
mkdir -p "$OUT"
step_of() { "$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['step'])" "$1/meta.json"; }
want=$(step_of "$RUN/padir/last")
# The training check's refinement steps, as the baseline's run recorded them.
steps=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['valid_steps'])" \
  "$RUN/padir/last/config.yaml")
names=(baseline)
checkpoints=("$RUN/padir/last")
for dir in "$RUN"/train_ablation/*/; do
  dir=${dir%/}
  [ -f "$dir/last/meta.json" ] || continue
  step=$(step_of "$dir/last")
  if [ "$step" != "$want" ]; then
    echo "skipping $(basename "$dir"): its last checkpoint is at step $step, not $want (still training?)" >&2
    continue
  fi
  names+=("$(basename "$dir")")
  checkpoints+=("$dir/last")
done
hyps=()
for i in "${!names[@]}"; do
  echo "${names[$i]} ${want}" >> "$OUT/steps.txt"
  echo "translating $(wc -l < "$SRC") validation lines with ${names[$i]}" >&2
  OMP_NUM_THREADS=$THREADS "$PY" -m gmlm translate --checkpoint "${checkpoints[$i]}" \
    --input "$SRC" --output "$OUT/${names[$i]}.hyp" --steps "$steps" --precision fp32
  hyps+=("$OUT/${names[$i]}.hyp")
done
"$PY" -m sacrebleu "$REF" -i "${hyps[@]}" -m bleu --paired-bs --paired-bs-n 1000 --format json \
  > "$OUT/paired-bs.json"
"$PY" - "$OUT/paired-bs.json" <<'EOF'
import json, os, sys
for row in json.load(open(sys.argv[1])):
    b = row["BLEU"]
    p = "baseline" if b.get("p_value") is None else f"p={b['p_value']:.3f}"
    name = os.path.basename(row["system"]).removesuffix(".hyp")
    print(f"BLEU {b['score']:6.2f} (95% CI +-{b['ci']:.2f}, {p:>8})  {name}")
EOF
