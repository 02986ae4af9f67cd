"""`gmlm reproduce`: the project's main job, stage by stage (see gmlm.reproduce.pipeline)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.reproduce.config import (
    PRESETS_DIR,
    STAGES,
    list_reproduce_presets,
    load_reproduce_config,
    parse_stages,
)
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.publish import check_publish_target, publish_report

EPILOG = """\
stages, in order: {stages}
  ar1 trains the deep-encoder / 1-layer-decoder AR baseline (Kasai et al. 2021) for its own
  quality and speed rows; it is off unless ar1.enabled=true (the multi30k preset sets it)
presets (each one's own description):
{presets}

Rerunning the same command resumes: finished stages are skipped, an interrupted training or
distillation continues from its checkpoint, and a checkpoint given to a stage that changed on
disk since (the released models after an update) redoes the stages that read it, and so does
a corpus that now makes another dataset, unless a model was trained on it (then the run stops:
docs/training.md); a folder another `gmlm reproduce` is running in is refused. Outputs:
OUT/REPORT.md, OUT/stages/*.json (time each stage took), and one folder per stage.
"""


def preset_lines() -> str:
    """One line per reproduce preset: its name and the `description` its YAML file declares
    (read here so that the list never drifts from the presets)."""
    import yaml

    lines = []
    for name in list_reproduce_presets():
        text = (PRESETS_DIR / f"{name}.yaml").read_text(encoding="utf-8")
        description = (yaml.safe_load(text) or {}).get("description", "")
        lines.append(f"  {name:15s} {description}")
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce the paper end to end (theory, data, training, evaluation, report)",
        description="Run the reproduction pipeline of a preset into --out and write REPORT.md.",
        epilog=EPILOG.format(stages=", ".join(STAGES), presets=preset_lines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="demo", help="preset name or YAML file (default demo)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/PRESET)")
    p.add_argument("--stages", default=None, help="comma-separated stages to run (default all)")
    p.add_argument(
        "--redo",
        default=None,
        help="comma-separated finished stages to run again (among --stages); the finished "
        "stages that read their output and the report run again with them",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--publish",
        type=Path,
        default=None,
        help="also copy REPORT.md here (e.g. docs/results/multi30k-de-en.md) with its images "
        "beside it (in STEM-figures/); a new file, or a report published before, whose "
        "hand-written notes after its '<!-- gmlm: hand-written notes below ... -->' line are "
        "kept; any other existing file is refused, checked before the run",
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.reproduce.summary import final_lines  # loads torch (gmlm.analysis): not at --help

    cfg = load_reproduce_config(args.preset, args.overrides)
    only = parse_stages(args.stages)
    redo = [] if args.redo is None else parse_stages(args.redo, "--redo")
    out = args.out or Path("runs") / cfg.preset
    if args.publish is not None:
        check_publish_target(out, args.publish)  # not after hours of work
    run_reproduce(cfg, out, only, redo=redo, progress=not args.no_progress)
    for line in final_lines(cfg, out):
        print(line)
    if args.publish is not None:
        print(f"published: {publish_report(out, args.publish)}")
    return 0
