"""`gmlm export`: a compact inference copy of a checkpoint (bf16 weights by default)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.cli.flags import add_alias, add_checkpoint, add_precision
from gmlm.decoding.options import FLOAT_PRECISIONS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="copy a checkpoint for inference only, with bf16 weights (half the size)",
        description="Writes weights (safetensors), config, tokenizer and decoding defaults "
        "(decoding.json, if any) of --checkpoint (a checkpoint folder or a run folder, whose "
        "best one is taken) to --out, without optimizer state. `gmlm translate` and `gmlm "
        "bench` load the result directly.",
    )
    add_checkpoint(p, "checkpoint or run folder")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder to write (atomically): a new or empty one, never the checkpoint read nor "
        "a folder inside a checkpoint or training run (an export written there would replace "
        "or mix into what training wrote)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier export of the same --checkpoint and --format at --out (never "
        "anything else: an export of another checkpoint, or a folder holding other files, is "
        "refused with or without it)",
    )
    add_precision(p, "weight type", default="bf16", old_switch=None, choices=FLOAT_PRECISIONS)
    add_alias(p, "--dtype", "precision", "--precision {value}", choices=FLOAT_PRECISIONS)
    p.add_argument(
        "--format",
        choices=("gmlm", "ctranslate2"),
        default="gmlm",
        help="gmlm (default): a checkpoint folder; ctranslate2: a CTranslate2 model folder "
        "(fp32, with the tokenizer) of an AR checkpoint, for `gmlm bench --ctranslate2` and "
        "CTranslate2 itself (needs the extra: pip install 'gmlm[ctranslate2]'; --precision unused)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "ctranslate2":
        from gmlm.export.ctranslate2 import export_ctranslate2

        out = export_ctranslate2(args.checkpoint, args.out, force=args.force)
        print(f"wrote {out} (CTranslate2, fp32)")
        return 0
    import torch

    from gmlm.checkpoint.export import export_checkpoint
    from gmlm.io import MODEL_FILE

    dtype = torch.bfloat16 if args.precision == "bf16" else None
    out = export_checkpoint(args.checkpoint, args.out, dtype, force=args.force)
    size = (out / MODEL_FILE).stat().st_size
    print(f"wrote {out} ({args.precision} weights, {size / 2**20:.1f} MiB)")
    return 0
