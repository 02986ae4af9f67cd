"""CTranslate2 exports (:mod:`gmlm.export.ctranslate2`) decoded by gmlm's search rules, without
torch: what the bench's CTranslate2 worker and the service run.

    translator = Ct2Translator.load("ar-ct2", threads=1)
    translator.translate(["Ein Hund läuft."], SearchOptions(beam=5))

Needs the optional extra: ``pip install 'gmlm[ctranslate2]'``.

Decoding. :meth:`Ct2Translator.search` gives gmlm's greedy and beam search results
(:mod:`gmlm.decoding.autoregressive`) with CTranslate2 doing the work:

* the source gets EOS appended (``add_source_eos``);
* length limit L (EOS counted, ``max_len_a * src_len + max_len_b`` in float32 like gmlm,
  capped by max_target_len): CTranslate2 decodes at most L - 1 tokens; a hypothesis that
  ends without EOS reached the limit, where gmlm forces EOS, so its EOS log-probability is
  scored (``score_batch``) and added;
* EOS refused before ``min_length`` (``min_decoding_length = min_length - 1``); the special
  ids other than EOS are never output (``suppress_sequences``);
* beam ranking: CTranslate2 keeps beams by summed log-probability like gmlm and stops a
  sentence once it has k finished hypotheses, but divides by ``length ** alpha`` rather than
  the GNMT penalty. It runs with alpha = 1e-9 (a non-zero alpha keeps the k-finished stop;
  alpha 0 would stop as soon as the top beam ends, another rule) so its scores are the plain
  sums, and the k it returns are re-ranked here by gmlm's GNMT score. Those k, the best by
  sum, always hold the GNMT best: a dropped hypothesis has a lower sum than a kept one that
  is at least as long.

Known differences, both confined to scores of probability the model hardly uses:
CTranslate2 removes refused tokens before its softmax, gmlm after (so gmlm's scores are the
model's own); log-probabilities differ by the probability mass the model puts on refused
tokens (below 1e-6 for the trained Multi30k model). And when the length limit cuts a beam
search short, gmlm lets a candidate beyond the first k that stood in for a finished one
take the forced EOS; CTranslate2 has no such last step, so such a candidate is never
returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gmlm.data.lengths import encode_inputs
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.export.ctranslate2 import (
    COMPUTE_TYPES,
    CT2_FILES,
    INFO_FILE,
    Ct2ModelInfo,
    import_ctranslate2,
    is_export,
)

# CTranslate2 divides a finished hypothesis's summed log-probability by length ** alpha;
# in float32, length ** 1e-9 is exactly 1 for any length below 10^7, so scores stay sums.
RAW_SCORE_ALPHA = 1e-9


class SearchSettings(Protocol):
    """The fields of :class:`gmlm.decoding.SearchOptions` that decoding reads (named here so
    that this module does not import torch)."""

    @property
    def beam(self) -> int: ...
    @property
    def length_penalty(self) -> float: ...
    @property
    def max_len_a(self) -> float: ...
    @property
    def max_len_b(self) -> int: ...
    @property
    def min_length(self) -> int: ...
    @property
    def max_length(self) -> int | None: ...


@dataclass(frozen=True)
class Ct2Hypothesis:
    """As :class:`gmlm.decoding.autoregressive.Hypothesis`: tokens without BOS/EOS, summed
    log-probability with EOS, and that divided by the GNMT penalty of len(tokens) + 1."""

    tokens: list[int]
    log_prob: float
    score: float


def gnmt_penalty(length: int, alpha: float) -> float:
    """((5 + length) / 6) ** alpha, :func:`gmlm.decoding.scores.length_penalty` in float32
    (that module imports torch)."""
    return float(((np.float32(5.0) + np.float32(length)) / np.float32(6.0)) ** np.float32(alpha))


def length_limit(source_length: int, options: SearchSettings, max_target_len: int) -> int:
    """The longest output (EOS counted) for a source of `source_length` ids (EOS counted),
    as :func:`gmlm.decoding.autoregressive.max_lengths` computes it (in float32)."""
    if options.max_length is not None:
        limit = options.max_length
    else:
        a, b = np.float32(options.max_len_a), np.float32(options.max_len_b)
        limit = int(np.floor(a * np.float32(source_length) + b))
    return min(max(limit, 1), max_target_len)


class Ct2Translator:
    """A CTranslate2 export with its tokenizer, on `threads` CPU threads."""

    def __init__(self, folder: Path, translator: Any, tokenizer: Tokenizer, info: Ct2ModelInfo):
        self.folder = folder
        self.translator = translator
        self.tokenizer = tokenizer
        self.info = info
        self.pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.eos = self.pieces[info.eos_id]
        self.refused = [[self.pieces[i]] for i in info.refused_ids]

    @classmethod
    def load(cls, folder: str | Path, threads: int = 1, precision: str = "fp32") -> Ct2Translator:
        """`precision`: fp32 (CTranslate2's compute type float32) or int8 (int8, quantised
        as the export is loaded: int8 weights and matrix products, as gmlm's int8)."""
        if precision not in COMPUTE_TYPES:
            raise GmlmError(
                f"CTranslate2 precision {precision!r}: choose from {', '.join(COMPUTE_TYPES)}"
            )
        ct2 = import_ctranslate2()
        folder = Path(folder)
        if not is_export(folder):
            raise GmlmError(
                f"{folder}: not a CTranslate2 export (it needs {INFO_FILE} and "
                f"{', '.join(CT2_FILES)}); write one with `gmlm export --format ctranslate2`"
            )
        info = Ct2ModelInfo.read(folder)
        tokenizer = info.check_tokenizer(Tokenizer.load(folder / "tokenizer"), folder)
        try:
            translator = ct2.Translator(
                str(folder),
                device="cpu",
                compute_type=COMPUTE_TYPES[precision],
                intra_threads=threads,
            )
        except (RuntimeError, ValueError) as err:
            raise GmlmError(f"{folder}: CTranslate2 cannot load it ({err})") from None
        return cls(folder, translator, tokenizer, info)

    def search(
        self, sources: Sequence[Sequence[int]], options: SearchSettings, rescore: bool = False
    ) -> list[Ct2Hypothesis]:
        """The best hypothesis of each source (ids without EOS, non-empty, within
        max_source_len - 1), by gmlm's greedy (beam 1) or beam search rules.

        rescore: score every returned hypothesis again with CTranslate2 (one teacher-forced
        pass each), so that log-probabilities are the model's own as gmlm reports them
        rather than renormalised over the tokens decoding allows (see the module
        docstring), and beams are ranked by those. Off in the benchmark: a plain
        CTranslate2 run.
        """
        for i, source in enumerate(sources):
            if not source or len(source) + 1 > self.info.max_source_len:
                raise GmlmError(
                    f"source {i} has {len(source)} ids; give 1 to "
                    f"{self.info.max_source_len - 1} (EOS is added)"
                )
        limits = [length_limit(len(s) + 1, options, self.info.max_target_len) for s in sources]
        best: list[Ct2Hypothesis | None] = [None] * len(sources)
        for limit in sorted(set(limits)):
            rows = [i for i, n in enumerate(limits) if n == limit]
            pieces = [[self.pieces[t] for t in sources[i]] for i in rows]
            found = self._search(pieces, limit, options, rescore)
            for i, hypothesis in zip(rows, found, strict=True):
                best[i] = hypothesis
        return [h for h in best if h is not None]

    def _search(
        self, sources: list[list[str]], limit: int, options: SearchSettings, rescore: bool
    ) -> list[Ct2Hypothesis]:
        """Sources (pieces, without EOS) that share the length limit `limit`."""
        k = options.beam
        candidates: list[list[tuple[list[str], float]]]
        if limit == 1:  # gmlm forces EOS at once
            candidates = [[([], 0.0)] for _ in sources]
        else:
            results = self.translator.translate_batch(
                sources,
                beam_size=k,
                num_hypotheses=k,
                length_penalty=RAW_SCORE_ALPHA if k > 1 else 0.0,
                max_decoding_length=limit - 1,
                min_decoding_length=min(options.min_length - 1, limit - 1),
                suppress_sequences=self.refused,
                return_end_token=True,
                return_scores=True,
                max_input_length=0,
            )
            candidates = [list(zip(r.hypotheses, r.scores, strict=True)) for r in results]
        # Without EOS, a hypothesis reached the limit, where gmlm forces EOS: score that.
        todo = [
            (row, j)
            for row, found in enumerate(candidates)
            for j, (tokens, _) in enumerate(found)
            if rescore or not tokens or tokens[-1] != self.eos
        ]
        if todo:
            bodies = [self._body(candidates[row][j][0]) for row, j in todo]
            scored = self.translator.score_batch(
                [sources[row] for row, _ in todo], bodies, max_input_length=0
            )
            for (row, j), body, result in zip(todo, bodies, scored, strict=True):
                log_prob = candidates[row][j][1]  # with EOS it is rescored, else it had none
                total = sum(result.log_probs) if rescore else log_prob + result.log_probs[-1]
                candidates[row][j] = ([*body, self.eos], total)
        alpha = options.length_penalty
        return [
            max((self._hypothesis(tokens, lp, alpha) for tokens, lp in found), key=_score)
            for found in candidates
        ]

    def _body(self, pieces: list[str]) -> list[str]:
        """`pieces` without a final EOS."""
        return pieces[:-1] if pieces and pieces[-1] == self.eos else pieces

    def _hypothesis(self, pieces: list[str], log_prob: float, alpha: float) -> Ct2Hypothesis:
        tokens = [self.ids[p] for p in pieces[:-1]]  # the last piece is EOS
        return Ct2Hypothesis(tokens, log_prob, log_prob / gnmt_penalty(len(pieces), alpha))

    def translate_ids(
        self, sources: Sequence[Sequence[int]], options: SearchSettings
    ) -> list[list[int]]:
        """Output ids (no EOS) of each source: :meth:`search`'s best tokens."""
        return [h.tokens for h in self.search(sources, options)]

    def translate(self, sentences: Sequence[str], options: SearchSettings) -> list[str]:
        """Detokenized translations of raw sentences, cleaned and encoded as
        :meth:`gmlm.translation.translator.Translator.translate` does; an empty line gives an empty
        output, a line longer than max_source_len is an error naming it."""
        encoded = encode_inputs(self.tokenizer, sentences, self.info.max_source_len)
        rows = [i for i, ids in enumerate(encoded.ids) if ids]
        outputs = self.translate_ids([encoded.ids[i] for i in rows], options)
        texts = [""] * len(sentences)
        for i, ids in zip(rows, outputs, strict=True):
            texts[i] = self.tokenizer.decode(ids)  # one line, cleaned (Tokenizer.decode)
        return texts


def _score(hypothesis: Ct2Hypothesis) -> float:
    return hypothesis.score
