"""Which system for which job: the Pareto front against brute force, and the choices and
fronts of a fixed bench result, as the reports print them."""

from __future__ import annotations

import random

import pytest

from gmlm.bench import format_report, render_markdown
from gmlm.bench.tradeoffs import advice, latency_front, pareto_front, points, throughput_front
from tests.helpers.bench import fixture


def dominated(p: tuple[float, float], by: tuple[float, float], higher_x: bool) -> bool:
    x_as_good = by[0] >= p[0] if higher_x else by[0] <= p[0]
    return x_as_good and by[1] >= p[1] and by != p


@pytest.mark.parametrize("higher_x", [False, True])
def test_pareto_front_is_the_undominated_points_by_brute_force(higher_x: bool) -> None:
    rng = random.Random(7)
    for _ in range(500):
        grid = rng.random() < 0.5  # small integer grids make ties and duplicates common
        pts = [
            (float(rng.randint(0, 4)), float(rng.randint(0, 4)))
            if grid
            else (rng.uniform(1, 100), rng.uniform(30, 38))
            for _ in range(rng.randint(0, 12))
        ]
        front = pareto_front(pts, higher_x_is_better=higher_x)
        expected = {i for i, p in enumerate(pts) if not any(dominated(p, q, higher_x) for q in pts)}
        assert sorted(front) == sorted(expected), pts
        assert [pts[i] for i in front] == sorted(pts[i] for i in front)


def test_points_take_the_median_end_to_end_and_the_best_throughput() -> None:
    found = {p.label: p for p in points(fixture())}
    assert len(found) == 12
    padir = found["fp32 padir T=10 B=5"]  # 6.9 sentences/s at batch size 1, 48.1 at 2
    assert (padir.bleu, padir.latency_ms, padir.throughput, padir.batch_size) == (
        2.3,
        25.991,
        48.051,
        2,
    )
    assert found["fp32 padir T=1 B=5"].batch_size == 1
    assert [p.label for p in latency_front(list(found.values()))] == [
        "fp32 padir T=1 B=1",
        "fp32 padir T=10 B=5",
        "fp32 ar beam5",
    ]
    assert [p.label for p in throughput_front(list(found.values()))] == [
        "fp32 ar beam5",
        "fp32 padir T=10 B=5",
        "fp32 padir T=10 B=1",
    ]


def test_the_choices_follow_from_the_numbers() -> None:
    choice = advice(fixture())
    assert choice is not None
    assert "BLEU of the 3 timed sentences" in choice.intro and "(1, 2)" in choice.intro
    best, quick, busy, by_latency, by_throughput = choice.lines
    assert (
        best
        == "best translations: fp32 ar beam5 (BLEU 3.30, 63.13 ms, 8.9 sentences/s at batch size 2)"
    )
    # 2.30 is exactly 1 BLEU below the best: within the tolerance.
    assert quick.endswith(
        "fp32 padir T=10 B=5 (BLEU 2.30, 25.99 ms: 2.4x as fast as fp32 ar beam5)"
    )
    assert busy.endswith(
        "fp32 padir T=10 B=5 (BLEU 2.30, 48.1 sentences/s at batch size 2: 5.4x as fast as "
        "fp32 ar beam5)"
    )
    assert by_latency.endswith(
        "fp32 padir T=1 B=1 22.18 ms, BLEU 0.00; fp32 padir T=10 B=5 25.99 ms, BLEU 2.30; "
        "fp32 ar beam5 63.13 ms, BLEU 3.30"
    )
    assert by_throughput.endswith(
        "fp32 padir T=10 B=1 113.4 sent/s, BLEU 1.40; fp32 padir T=10 B=5 48.1 sent/s, "
        "BLEU 2.30; fp32 ar beam5 8.9 sent/s, BLEU 3.30"
    )


def test_a_row_just_beyond_the_tolerance_is_not_chosen_and_ties_go_to_the_faster() -> None:
    # teacher beam5 ties the best BLEU but is slower (272 ms): ar beam5 stays the best.
    choice = advice(fixture({"padir T=10 B=5": 2.29, "teacher beam5": 3.3}))
    assert choice is not None
    best, quick, busy = choice.lines[:3]
    assert best.startswith("best translations: fp32 ar beam5 (")
    # Within 1 BLEU of 3.30 now: AR and teacher rows only, of which ar beam5 is the fastest.
    assert quick.endswith("the same row, fp32 ar beam5")
    assert busy.endswith("the same row, fp32 ar beam5")


def test_reports_say_which_system_for_which_job_and_old_files_do_not() -> None:
    result = fixture()
    choice = advice(result)
    assert choice is not None
    markdown = render_markdown(result, [("BLEU vs latency", "plots/a.png")])
    assert markdown.startswith(choice.intro + ":\n\n- Best translations: fp32 ar beam5 (")
    assert "\n\n![BLEU vs latency](plots/a.png)\n\nHow the numbers were made:\n\n- " in markdown
    text = format_report(result)
    assert text.endswith("\n".join([choice.intro + ":", *(f"  {x}" for x in choice.lines)]))
    older = fixture({row.system: None for row in result.results})
    assert advice(older) is None and points(older) == []
    assert "Which system" not in render_markdown(older) + format_report(older)
