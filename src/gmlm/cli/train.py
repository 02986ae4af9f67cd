"""`gmlm train`: train the autoregressive baseline or PaDIR."""

from __future__ import annotations

import argparse

import yaml

from gmlm.config import list_presets, to_dict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an AR or PaDIR model on a prepared dataset",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train with a preset and key=value overrides, e.g.\n"
        "  gmlm train --config small-padir data=runs/data/multi30k out=runs/padir\n"
        "  gmlm train --config tiny-ar data=DIR out=DIR max_steps=200 optim.lr=1e-3\n"
        "Re-running the same command resumes from OUT/last (exactly, also after kill -9).\n"
        "OUT is a new or empty folder, or a run folder to resume; other folders (a checkpoint,\n"
        "a prepared dataset, a folder inside a checkpoint or run) are refused, and so is an\n"
        "OUT another run is training in. A save that fails (a full disk) stops with one line\n"
        "and keeps the previous OUT/last.\n"
        "Fine-tuning: init_from=CHECKPOINT starts a new run from a checkpoint's weights (the\n"
        "same model, dropout rates aside, and the same tokenizer), optimizer and steps afresh.\n"
        "Data parallel: torchrun --nproc_per_node 2 -m gmlm train --config ... (gloo on CPU).\n"
        "precision=auto (the default) is fp32 on every CPU and bf16 autocast on bf16 GPUs;\n"
        "precision=bf16 on a CPU is opt-in: gmlm throughput measures whether it pays here.\n\n"
        f"presets: {', '.join(list_presets())}",
    )
    p.add_argument("--config", default="small-padir", help="preset name or YAML file of overrides")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides (data=DIR and out=DIR are required)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.training.config import load_train_config
    from gmlm.training.trainer import Trainer

    cfg = load_train_config(args.config, args.overrides)
    trainer = Trainer(cfg, progress=not args.no_progress)
    trainer.log("resolved config:\n" + yaml.safe_dump(to_dict(cfg), sort_keys=False).rstrip())
    result = trainer.run()
    trainer.log(f"done: step {result.step}; best {result.best}; run folder {result.run_dir}")
    return 0
