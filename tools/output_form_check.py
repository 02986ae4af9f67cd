"""Are the shipped models' outputs well-formed text? Counts, on the `val` split of each
direction, the lines of each shipped model's translation with a replacement mark (U+FFFD), a
double space, a space at either end, a line break, or nothing at all, beside the references.

    python tools/output_form_check.py --multi30k ../shared/data/multi30k

0 everywhere is the target: decoding drops byte pieces that spell no whole character and
returns text in the cleaned form of the training text (gmlm.data.Tokenizer.decode). fp32, each
checkpoint's decoding defaults, the torch threads of the machine (set OMP_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gmlm

ROOT = Path(__file__).resolve().parents[1]

CHECKS = {
    "U+FFFD": lambda line: "\ufffd" in line,
    "double space": lambda line: "  " in line,
    "space at an end": lambda line: line != line.strip(),
    "line break": lambda line: bool(re.search(r"[\r\n\v\f\x85\u2028\u2029]", line)),
    "empty": lambda line: not line,
}


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--multi30k", type=Path, required=True, help="the Multi30k folder")
    args = parser.parse_args()
    for direction, (source, target) in {"de-en": ("de", "en"), "en-de": ("en", "de")}.items():
        sources = read(args.multi30k / f"val.{source}.gz")
        references = read(args.multi30k / f"val.{target}.gz")
        counts = {name: sum(map(check, references)) for name, check in CHECKS.items()}
        print(f"{direction} references: {counts}")
        for name in ("padir", "ar"):
            translator = gmlm.load(ROOT / "checkpoints" / f"multi30k-{direction}" / name, "cpu")
            outputs = translator.translate(sources, batch_size=64)
            counts = {name: sum(map(check, outputs)) for name, check in CHECKS.items()}
            print(f"{direction} {name} ({len(outputs)} lines): {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
