"""Repeated words dropped from a detokenized PaDIR output: the final dedup at the word level.

PaDIR's final dedup (`gmlm.decoding.refinement`) drops the second copy of an immediately
repeated n-gram of tokens. A repeat can hide from it in the tokens: the same word in another
case ("vier Vier"), or spelt with other pieces ("U-Bahn" as one piece, then as three), so
the text still shows "auf einer U-Bahn auf einer U-Bahn". Here the same rule runs on the
detokenized text's words: the second copy of an immediately repeated run of up to `longest`
words is dropped, the words compared case-insensitively (str.casefold) and whole, with
punctuation, except that punctuation ending the second copy is allowed there and kept in the
output. So "auf einer U-Bahn auf einer U-Bahn." becomes "auf einer U-Bahn.", "vier Vier"
becomes "vier", and "lächeln, lächeln" stays (a comma may end a clause: "Ein Mann, der
fährt, fährt schnell").

A word is a whitespace-separated chunk with a letter or digit; punctuation standing alone is
never part of a repeat. A line with no repeat comes back as it was, spacing included.
"""

from __future__ import annotations


def drop_repeated_words(text: str, longest: int) -> str:
    """`text` without the second copy of each immediately repeated run of 1 to `longest`
    words (the module docstring says how words compare)."""
    chunks = text.split()
    kept: list[str] = []
    dropped = False
    for chunk in chunks:
        kept.append(chunk)
        for n in range(1, min(longest, len(kept) // 2) + 1):
            if _repeats(kept[-2 * n : -n], kept[-n:]):
                tail = _trailing_punctuation(kept[-1])
                del kept[-n:]
                kept[-1] += tail
                dropped = True
                break
    return " ".join(kept) if dropped else text


def _repeats(first: list[str], second: list[str]) -> bool:
    """Whether `second` repeats `first` word for word (its last word may end in punctuation
    that `first` lacks)."""
    if not all(_is_word(word) for word in first):
        return False
    last = second[-1]
    core = last[: len(last) - len(_trailing_punctuation(last))]
    left = [word.casefold() for word in first]
    return left[:-1] == [word.casefold() for word in second[:-1]] and left[-1] == core.casefold()


def _trailing_punctuation(word: str) -> str:
    """The characters after the last letter or digit of `word`."""
    end = len(word)
    while end and not word[end - 1].isalnum():
        end -= 1
    return word[end:]


def _is_word(chunk: str) -> bool:
    return any(character.isalnum() for character in chunk)
