"""The commands that write files named on their command line, and a folder of stand-in inputs
for them: shared by the tests of the output rules (outputs never inputs, one writer per file)."""

from __future__ import annotations

from pathlib import Path

SENTENCE = "Ein Hund läuft über die Wiese.\n"

# Per command: its arguments ({out} is the output under test, {tmp} the test folder), the
# input file or folder the output aliases (relative to {tmp}), and whether the command reads
# standard input. An output file aliases a file: the input itself, or a file inside an input
# folder; an output folder aliases the input folder.
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "translate --output, --input": (
        "translate --checkpoint {tmp}/ckpt --input {tmp}/in.txt --output {out}",
        "in.txt",
        False,
    ),
    "translate --output, stdin": (
        "translate --checkpoint {tmp}/ckpt --output {out}",
        "in.txt",
        True,
    ),
    "translate --output, --checkpoint": (
        "translate --checkpoint {tmp}/ckpt --input {tmp}/in.txt --output {out}",
        "ckpt/meta.json",
        False,
    ),
    "translate --output, --rescore": (
        "translate --checkpoint {tmp}/ckpt --rescore {tmp}/data --input {tmp}/in.txt "
        "--output {out}",
        "data/manifest.json",
        False,
    ),
    "loadtest --output": ("loadtest --input {tmp}/in.txt --output {out}", "in.txt", False),
    "loadtest --markdown": ("loadtest --input {tmp}/in.txt --markdown {out}", "in.txt", False),
    "loadtest --plot": ("loadtest --input {tmp}/in.txt --plot {out}", "in.txt", False),
    "bench --markdown, --replot": ("bench --replot {tmp}/in.txt --markdown {out}", "in.txt", False),
    "bench --output, --data": (
        "bench --ar {tmp}/ckpt --padir {tmp}/ckpt --data {tmp}/data --output {out}",
        "data/manifest.json",
        False,
    ),
    "analyze attention --output": (
        "analyze attention --checkpoint {tmp}/ckpt --data {tmp}/data --output {out}",
        "data/manifest.json",
        False,
    ),
    "analyze length --output": (
        "analyze length --checkpoint {tmp}/ckpt --data {tmp}/data --output {out}",
        "ckpt/meta.json",
        False,
    ),
    "analyze ablation --output": (
        "analyze ablation --checkpoint {tmp}/ckpt --data {tmp}/data --output {out}",
        "data/manifest.json",
        False,
    ),
    "analyze calibrate --output": (
        "analyze calibrate --checkpoint {tmp}/ckpt --data {tmp}/data --output {out}",
        "data/manifest.json",
        False,
    ),
    "analyze table1 --markdown": (
        "analyze table1 --direction de-en={tmp}/ckpt --multi30k {tmp}/m30k --markdown {out}",
        "m30k/test_2016_flickr.de",
        False,
    ),
    "reproduce --publish": ("reproduce --out {tmp}/run --publish {out}", "run/REPORT.md", False),
    "export --out": ("export --checkpoint {tmp}/ckpt --out {out}", "ckpt", False),
    "average --out": ("average --run {tmp}/trun --out {out}", "trun", False),
    "export --format ctranslate2 --out": (
        "export --format ctranslate2 --checkpoint {tmp}/ckpt --out {out}",
        "ckpt",
        False,
    ),
}


def output_layout(tmp: Path) -> None:
    """The inputs the commands of the table read: a sentence file, a checkpoint-like folder,
    a dataset-like folder, a Multi30k-like folder, a reproduce run with a report and a
    training run with a kept history step."""
    (tmp / "in.txt").write_text(SENTENCE, encoding="utf-8")
    for name in ("ckpt/meta.json", "data/manifest.json", "m30k/test_2016_flickr.de"):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text("{}\n", encoding="utf-8")
    (tmp / "run").mkdir()
    (tmp / "run" / "REPORT.md").write_text("# not yet\n", encoding="utf-8")
    # a training run as `gmlm average` checks one before writing: its config, a `last`
    # checkpoint and a kept history step
    for name in (
        "trun/config.yaml",
        "trun/last/model.safetensors",
        "trun/history/step-00000010.safetensors",
    ):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text("{}\n", encoding="utf-8")
