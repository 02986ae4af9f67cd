import errno
import json
import os
from pathlib import Path

import pytest
import yaml

from gmlm.cli.main import main
from tests.helpers.corpora import make_pairs, write_lines


@pytest.fixture
def corpus_spec(tmp_path: Path) -> str:
    src, tgt = make_pairs(300)
    return f"files:{write_lines(tmp_path / 'c.de', src)},{write_lines(tmp_path / 'c.en', tgt)}"


def test_prepare_stats_bench(
    corpus_spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    args = ["data", "prepare", "--corpus", corpus_spec, "--out", str(out), "--vocab-size", "400"]
    rc = main([*args, "--threads", "1", "--no-progress", "filter.max_ratio=0", "test_fraction=0.2"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "train" in printed and "length_ratio" in printed
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["filter"]["max_ratio"] == 0 and saved["tokenizer"]["vocab_size"] == 400
    assert saved["test_fraction"] == 0.2 and saved["corpus"] == corpus_spec

    assert main(["data", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["splits"]["train"]["pairs"] + stats["splits"]["test"]["pairs"] > 250

    assert main(["data", "bench", str(out), "--epochs", "1", "--max-tokens", "512"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["iterator"]["max_tokens"] == 512 and last["iterator"]["tgt_tokens_per_s_median"] > 0
    assert last["environment"]["torch_threads"] >= 1

    # Options that only preparing a corpus uses are refused with a folder, not ignored; so is
    # a benchmark with nothing to time (more processes than any batch has pairs).
    bench = ["data", "bench", str(out), "--epochs", "1"]
    for extra, named in [
        (["--set", "valid_fraction=abc"], "--set"),
        (["--max-len", "2", "--tokenizer", "/nonexistent"], "--max-len, --tokenizer"),
        (["--vocab-size", "5", "--valid", "files:x,y"], "--vocab-size, --valid"),
    ]:
        assert main([*bench, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gmlm: error: data bench: {named} set how a corpus is prepared"), err
    assert main([*bench, "--world-size", "1000"]) == 2
    err = capsys.readouterr().err
    assert "make no batch for 1,000 processes" in err and "lower --world-size" in err, err


def test_bench_with_corpus_times_preparation(
    corpus_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["data", "bench", "--corpus", corpus_spec, "--set", "tokenizer.vocab_size=400"]
    assert main([*argv, "--epochs", "1", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["prepare"]["vocab_size"] <= 400 and report["prepare"]["wall_s"] > 0
    assert set(report["prepare"]) >= {"tokenizer_s", "read_s", "total_s", "meets_target"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["data", "prepare", "--corpus", "wmt:14", "--out", "X"], "unknown corpus spec 'wmt:14'"),
        (["data", "stats", "NOWHERE"], "no such dataset folder"),
        (["data", "prepare", "--out", "X", "filter.nope=1"], "unknown config key 'filter.nope'"),
        (["data", "bench"], "give either a prepared dataset folder or --corpus"),
    ],
)
def test_errors_are_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gmlm: error: ") and message in err[-1]
    assert len(err) == 1


def test_mismatched_files_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_lines(tmp_path / "a.de", ["eins", "zwei"])
    tgt = write_lines(tmp_path / "a.en", ["one"])
    rc = main(["data", "prepare", "--corpus", f"files:{src},{tgt}", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "a.de has 2 lines but" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_prepare_help_documents_specs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["data", "prepare", "--help"])
    text = capsys.readouterr().out
    for fragment in ("bible:PAIR", "multi30k:DIR", "--valid files:dev.de,dev.en", "tsv:FILE"):
        assert fragment in text


def test_prepare_errors_speak_gmlm_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alphabet = [chr(0x4E00 + i) for i in range(200)]  # more characters than 300 pieces hold
    src = ["".join(alphabet[(7 * i + j) % 200] for j in range(10)) for i in range(400)]
    tgt = [f"sentence {i}" for i in range(400)]
    spec = f"files:{write_lines(tmp_path / 'z.zh', src)},{write_lines(tmp_path / 'z.en', tgt)}"
    base = ["data", "prepare", "--corpus", spec, "--threads", "1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "o"), "--vocab-size", "300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("gmlm: error: tokenizer training failed: vocab_size=300 is too small")
    assert "--vocab-size" in err and "--character_coverage" not in err
    assert main([*base, "--out", str(tmp_path / "o"), "tokenizer.character_coverage=0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "gmlm: error: tokenizer.character_coverage=0.9 must be between 0.98 and 1 "
        "(SentencePiece's least)"
    )
    (tmp_path / "file").write_text("x")
    assert main([*base, "--out", str(tmp_path / "file" / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"{tmp_path / 'file'} is a file, not a folder; choose another path")
    assert not (tmp_path / "o").exists()


def test_a_full_disk_is_one_line_and_keeps_the_previous_dataset(
    corpus_spec: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "ds"
    args = ["data", "prepare", "--corpus", corpus_spec, "--out", str(out), "--vocab-size", "400"]
    args += ["--threads", "1", "--no-progress"]
    assert main(args) == 0
    before = {p: p.read_bytes() for p in out.iterdir()}

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    capsys.readouterr()
    assert main([*args, "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"gmlm: error: cannot write {out}: No space left on device; free some space or choose "
        "another path"
    )
    assert not [line for line in err if "Traceback" in line]
    assert {p: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.de", "c.en", "ds"]


def test_prepare_settings_layer_defaults_config_flags_then_overrides(tmp_path: Path) -> None:
    """DataConfig's defaults, then --config, then the flags (PrepareSettings), then KEY=VALUE:
    each later one wins where it sets something, and DataConfig's defaults are the settings'."""
    from gmlm.cli.data import _config
    from gmlm.cli.main import build_parser
    from gmlm.data.prepare import DataConfig
    from gmlm.data.settings import PrepareSettings

    defaults = DataConfig()
    settings = PrepareSettings()
    assert (defaults.tokenizer.vocab_size, defaults.filter.max_len, defaults.threads) == (
        settings.vocab_size,
        settings.max_len,
        settings.threads,
    )
    config = tmp_path / "data.yaml"
    config.write_text("tokenizer: {vocab_size: 500}\nfilter: {max_len: 100}\nthreads: 3\n")

    def resolved(*argv: str) -> DataConfig:
        return _config(build_parser().parse_args(["data", "prepare", "--out", "o", *argv]))

    assert resolved() == defaults
    cfg = resolved("--config", str(config), "--vocab-size", "600", "filter.max_len=90")
    assert (cfg.tokenizer.vocab_size, cfg.filter.max_len, cfg.threads) == (600, 90, 3)
    cfg = resolved("--config", str(config), "--max-len", "80", "--tokenizer", "tok")
    assert (cfg.filter.max_len, cfg.tokenizer.path, cfg.tokenizer.vocab_size) == (80, "tok", 500)
    cfg = resolved("--threads", "2", "threads=4", "--corpus", "files:a,b", "--valid", "files:c,d")
    assert (cfg.threads, cfg.corpus, cfg.valid, cfg.test) == (4, "files:a,b", "files:c,d", "")
    args = ["data", "bench", "--corpus", "c", "--max-len", "70", "--set", "threads=1"]
    cfg = _config(build_parser().parse_args(args))
    assert (cfg.filter.max_len, cfg.threads) == (70, 1)
