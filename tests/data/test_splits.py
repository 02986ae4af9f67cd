from gmlm.data.corpora import carve_splits
from gmlm.data.parallel import Corpus, ParallelText
from gmlm.data.splits import assign_splits

KEYS = [f"{b}:{c}:{v}" for b in range(1, 5) for c in range(1, 30) for v in range(1, 40)]


def test_assignment_is_deterministic_and_order_free() -> None:
    first = assign_splits(KEYS, valid_fraction=0.05, test_fraction=0.05)
    again = dict(
        zip(KEYS, assign_splits(KEYS, valid_fraction=0.05, test_fraction=0.05), strict=True)
    )
    shuffled = list(reversed(KEYS))
    by_key = dict(
        zip(shuffled, assign_splits(shuffled, valid_fraction=0.05, test_fraction=0.05), strict=True)
    )
    assert dict(zip(KEYS, first, strict=True)) == again == by_key
    share = {s: first.count(s) / len(KEYS) for s in ("train", "valid", "test")}
    assert 0.035 < share["valid"] < 0.065 and 0.035 < share["test"] < 0.065


def test_carving_one_split_matches_carving_both() -> None:
    both = assign_splits(KEYS, valid_fraction=0.05, test_fraction=0.05)
    corpus = Corpus("x", {"train": ParallelText(KEYS, KEYS, KEYS)})
    carved = carve_splits(corpus, valid_fraction=0.05, test_fraction=0.05)
    assert carved["test"].keys == [k for k, s in zip(KEYS, both, strict=True) if s == "test"]
    given_valid = Corpus(
        "x", {"train": ParallelText(KEYS, KEYS, KEYS), "valid": ParallelText(["v"], ["v"])}
    )
    carved_test = carve_splits(given_valid, valid_fraction=0.05, test_fraction=0.05)
    assert carved_test["test"].keys == carved["test"].keys
    assert carved_test["valid"].src == ["v"]
    assert len(carved_test["train"]) == len(KEYS) - len(carved_test["test"])


def test_splits_are_disjoint_and_duplicates_stay_together() -> None:
    src = [f"sentence {i % 300}" for i in range(1200)]  # every source appears 4 times
    corpus = Corpus("x", {"train": ParallelText(src, [s.upper() for s in src])})
    carved = carve_splits(corpus, valid_fraction=0.1, test_fraction=0.1)
    sets = {name: set(text.src) for name, text in carved.items()}
    assert sets["train"].isdisjoint(sets["valid"]) and sets["train"].isdisjoint(sets["test"])
    assert sets["valid"].isdisjoint(sets["test"])
    assert sum(len(t) for t in carved.values()) == 1200
    assert all(len(t) % 4 == 0 for t in carved.values())
