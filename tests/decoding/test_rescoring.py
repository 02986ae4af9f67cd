"""Rescoring PaDIR's candidates with an autoregressive model: the rows it reads, the scores it
gives (against one model call per candidate), and the choice they make."""

from __future__ import annotations

import pytest
import torch

from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import (
    RefinementState,
    output_mask,
    refine,
    refinement_init,
    refinement_step,
)
from gmlm.decoding.rescoring import candidate_targets, mean_log_probs, rescorer
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.models.autoregressive import teacher_forcing_input
from tests.helpers.reversal import CONFIG, EOS, PAD

NO_PRUNING = RefinementOptions(prune_after=0)


def finished(model: PadirModel, src: torch.Tensor, options: RefinementOptions) -> RefinementState:
    state = refinement_init(model, src, options, 0)
    while state.rows.numel():
        state = refinement_step(model, state, options)
    return state


@pytest.mark.parametrize("options", [RefinementOptions(), RefinementOptions(dedup=False)])
def test_candidate_targets_are_the_kept_tokens_then_eos(options: RefinementOptions) -> None:
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(6, 9, (40, 10), generator=g)  # 3 ids: many repeats
    initial = torch.randint(6, 9, (40, 10), generator=g)
    lengths = torch.randint(1, 11, (40,), generator=g)
    targets = candidate_targets(tokens, initial, lengths, options, CONFIG)
    keep = output_mask(tokens, initial, lengths, options)
    assert targets.shape == tokens.shape
    for row in range(40):
        kept = [int(t) for t, k in zip(tokens[row], keep[row], strict=True) if k]
        expected = kept + [EOS] + [PAD] * (10 - len(kept) - 1)
        assert targets[row].tolist() == expected


def test_mean_log_probs_equal_one_model_call_per_candidate(
    trained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:3]
    g = torch.Generator().manual_seed(1)
    rows = [
        torch.randint(CONFIG.n_special, CONFIG.vocab_size, (n,), generator=g).tolist()
        for n in (0, 3, 7, 5)
    ]
    sentence = torch.tensor([0, 2, 2, 1])
    targets = torch.full((4, 8), PAD)
    for i, row in enumerate(rows):
        targets[i, : len(row) + 1] = torch.tensor([*row, EOS])
    model = trained_ar.eval()
    with torch.no_grad():
        batched = mean_log_probs(model, src, targets, sentence)
        for i, row in enumerate(rows):
            one = torch.tensor([[*row, EOS]])
            source = src[int(sentence[i])]
            source = source[source != PAD].unsqueeze(0)
            logits = model(source, teacher_forcing_input(one, CONFIG))
            expected = logits.log_softmax(-1).gather(2, one.unsqueeze(2)).mean()
            assert batched[i].item() == pytest.approx(expected.item(), abs=1e-5)


def test_rescoring_by_zero_changes_nothing(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:6]
    model = trained_padir.eval()
    plain = refine(model, src, NO_PRUNING)
    zero = refine(model, src, NO_PRUNING, rescore=lambda s: torch.zeros(s.tokens.shape[0]))
    assert [(r.tokens, r.candidate, r.score) for r in zero] == [
        (r.tokens, r.candidate, r.score) for r in plain
    ]


@pytest.mark.parametrize("options", [NO_PRUNING, RefinementOptions(prune_after=1, prune_keep=(2,))])
def test_a_heavy_rescoring_model_chooses_its_best_candidate(
    trained_padir: PadirModel,
    untrained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    options: RefinementOptions,
) -> None:
    """With a weight that dwarfs PaDIR's scores, each sentence gets the candidate that the
    rescoring model scores highest among those pruning kept (the lowest index of equals)."""
    src = reversal[0][:8]
    padir = trained_padir.eval()
    state = finished(padir, src, options)
    with torch.no_grad():
        targets = candidate_targets(state.tokens, state.initial, state.lengths, options, CONFIG)
        k = state.candidates
        sentence = torch.arange(targets.shape[0]) // k
        ar_scores = mean_log_probs(untrained_ar, src, targets, sentence)
    results = refine(padir, src, options, rescore=rescorer(untrained_ar, src, options, 1e6))
    chosen_by_padir = refine(padir, src, options)
    differs = 0
    for b, result in enumerate(results):
        rows = range(b * k, (b + 1) * k)
        eligible = [c for c in rows if not state.pruned[c]]
        best = max(eligible, key=lambda c: (float(ar_scores[c]), -c))
        same = [c for c in eligible if targets[c].tolist() == targets[best].tolist()]
        assert result.candidate + b * k in same
        differs += result.tokens != chosen_by_padir[b].tokens
    assert differs  # the rescoring model's choice is not PaDIR's for every sentence
