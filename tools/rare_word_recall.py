"""Reference-word recall of translations, by how often each word occurs in the training targets:
where one system's translations lose the reference's words against another's (the lexical
choice of low-frequency words that sequence-level distillation is known to cost a
non-autoregressive model: Ding et al., ACL 2021).

Words are sacrebleu's 13a tokens (case kept). For each bucket of training counts, a system's
recall is the reference words of that bucket it produced (clipped per sentence, as BLEU's
unigram matches are) over the reference words of that bucket. With --distilled, the last
column is how many times the bucket's reference words occur in the distilled targets against
the raw ones. Run from the repository root, e.g.

    .venv/bin/python tools/rare_word_recall.py --train ../shared/data/multi30k/train.de.gz \\
        --distilled RUN/distill/train.tgt.txt --ref val.de --hyp ar=ar.de --hyp padir=padir.de
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from gmlm.data.textfiles import read_lines

EDGES = (0, 1, 5, 20, 100, 1000)  # bucket lower bounds; the last is open-ended


def words(lines: Iterable[str]) -> list[list[str]]:
    tokenize = Tokenizer13a()
    return [tokenize(line.strip()).split() for line in lines]


def bucket(count: int) -> int:
    return max(i for i, edge in enumerate(EDGES) if count >= edge)


def label(i: int) -> str:
    if i == len(EDGES) - 1:
        return f"{EDGES[i]}+"
    last = EDGES[i + 1] - 1
    return str(last) if last == EDGES[i] else f"{EDGES[i]}-{last}"


def recall(
    refs: Sequence[list[str]], hyps: Sequence[list[str]], counts: Counter[str]
) -> list[tuple[int, int]]:
    """(matched, total) reference words per bucket."""
    found = [[0, 0] for _ in EDGES]
    for ref, hyp in zip(refs, hyps, strict=True):
        produced = Counter(hyp)
        for word, n in Counter(ref).items():
            b = bucket(counts[word])
            found[b][0] += min(n, produced[word])
            found[b][1] += n
    return [(m, t) for m, t in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=Path, required=True, help="raw training targets")
    parser.add_argument("--distilled", type=Path, help="distilled training targets")
    parser.add_argument("--ref", type=Path, required=True, help="references, one per line")
    parser.add_argument(
        "--hyp", action="append", required=True, metavar="NAME=FILE", help="repeat; the first "
        "is the one the others are compared with"
    )  # fmt: skip
    args = parser.parse_args()
    raw = Counter(w for line in words(read_lines(args.train)) for w in line)
    kd = (
        Counter(w for line in words(read_lines(args.distilled)) for w in line)
        if args.distilled
        else None
    )
    refs = words(read_lines(args.ref))
    systems = dict(h.split("=", 1) for h in args.hyp)
    found = {}
    for name, path in systems.items():
        hyps = words(read_lines(Path(path)))
        if len(hyps) != len(refs):
            parser.error(f"--hyp {name}={path}: {len(hyps)} lines, --ref has {len(refs)}")
        found[name] = recall(refs, hyps, raw)
    names = list(systems)
    header = ["training count", "reference words", *(f"{n} recall" for n in names)]
    header += [f"{n} - {names[0]}" for n in names[1:]]
    if kd is not None:
        header.append("distilled / raw count")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" + "---:|" * (len(header) - 1))
    for b in range(len(EDGES)):
        total = found[names[0]][b][1]
        rates = [found[n][b][0] / total if total else 0.0 for n in names]
        cells = [label(b), str(total), *(f"{r:.3f}" for r in rates)]
        cells += [f"{r - rates[0]:+.3f}" for r in rates[1:]]
        if kd is not None:
            vocab = {w for ref in refs for w in ref if bucket(raw[w]) == b}
            base = sum(raw[w] for w in vocab)
            cells.append(f"{sum(kd[w] for w in vocab) / base:.2f}" if base else "-")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
