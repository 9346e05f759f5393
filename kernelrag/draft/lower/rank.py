"""Memory picks the variant: the graph's evidence orders the template-variant combinations.

Each variant stands for one transformation of the vocabulary (``VARIANT_TRANSFORMATION``).
``ReasoningGraph.suggest`` ranks transformations for the task's pattern, falling back
to similar patterns (same category, shared ops); a combination scores the sum of its
variants' scores, and ties keep the templates' default first. With no graph (or no
evidence yet) the order is the default one, so every round still tries an untried
combination; a variant of the default that the graph has never seen goes first, in the
best-ranked combination that holds it, so a new variant gets its first round where its
template made it the default.

Where every variant of a region has been timed on exactly this pattern (a side-by-side A/B
such as ``bench/conv_variants.py``, or earlier rounds), the measured speedups decide first: a
score counts successes only, so two variants that both lost to torch.compile scored
alike, and on the H200 (2026-12-02) implicit GEMM stayed first for conv3d > group_norm >
silu at 0.45x while channels-last ran the same task at 0.94x.

A candidate that ran but missed the task's tolerance says nothing about speed: its next round
moves a region off the inexact dot path it used (``repair_order``), whatever the evidence on the
other variants. On the H200 (2026-12-05) qk_scale_mask_softmax failed its large-magnitude trial
on 3xTF32 logits (exp amplifies their error), and its second round, ranked by the graph, kept
3xTF32 and changed the row kernel instead.
"""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower.protocol import VARIANT_TRANSFORMATION

# The fp32 dot paths of the GEMM template, least accurate first (templates/gemm.py documents them).
DOT_ACCURACY = ("tf32x3", "bf16x6", "ieee")


def accuracy_step(combo: tuple[str, ...], missed: tuple[str, ...]) -> int:
    """How far ``combo`` moves a region of ``missed`` up ``DOT_ACCURACY`` (the smallest such step;
    0 when it moves none)."""
    if len(combo) != len(missed):
        return 0
    steps = [DOT_ACCURACY.index(c) - DOT_ACCURACY.index(m) for c, m in zip(combo, missed)
             if c in DOT_ACCURACY and m in DOT_ACCURACY and DOT_ACCURACY.index(c) > DOT_ACCURACY.index(m)]
    return min(steps, default=0)


def repair_order(combos: list[tuple[str, ...]], missed: tuple[str, ...]) -> list[tuple[str, ...]]:
    """``combos`` after the combination ``missed`` ran and missed the tolerance: first those that put
    a region of ``missed`` on a more accurate dot path, the smaller step first (bf16x6 before
    ieee: about 3xTF32's time against several times it); the rest keep their order."""
    steps = [accuracy_step(c, missed) for c in combos]
    ranked = sorted(range(len(combos)), key=lambda k: (steps[k] == 0, steps[k], k))
    return [combos[k] for k in ranked]


def lower_order(combos: list[tuple[str, ...]], pattern: Any, graph: Any = None) -> list[tuple[str, ...]]:
    if graph is None or not getattr(pattern, "known", False) or len(combos) < 2:
        return list(combos)
    try:
        scores = {s.transformation: s.score for s in graph.suggest(pattern, k=32)}
    except Exception:            # a graph that cannot answer leaves the default order
        return list(combos)

    def score(combo: tuple[str, ...]) -> float:
        return sum(scores.get(VARIANT_TRANSFORMATION.get(v, v), 0.0) for v in combo)

    rows = _table(graph, pattern)                 # every transformation's records on exactly this pattern
    timed = {s.transformation: s.median_speedup_vs_compile for s in rows if s.median_speedup_vs_compile}
    measured = _measured(combos, timed)
    order = sorted(range(len(combos)), key=lambda k: (-measured[k], -score(combos[k]), k))
    new = _unseen(combos[0], set(scores) | {s.transformation for s in rows}, getattr(graph, "vocabulary", {}))
    if new:          # a variant of the default never tried: its best-ranked combination first
        first = next(k for k in order if new <= set(combos[k]))
        order = [first] + [k for k in order if k != first]
    return [combos[k] for k in order]


def _unseen(combo: tuple[str, ...], known: set[str], vocabulary: Any) -> set[str]:
    """The variants of ``combo`` whose transformation the graph holds no record of on this pattern
    (failures included) and no success of on a similar one. Ranked by evidence alone they would
    come last for ever: the cooperative rows, new and the default for rows of 32768, were never
    reached by the two rounds of the suite's softmaxes on the H100 (2026-12-06), whose older
    variants' records filled them. The other regions keep the evidence's pick: conv3d > group
    norm > silu's default put the new norm kernel after the implicit-GEMM conv, which the graph
    had timed at 0.45x beside channels-last's 0.94x, and ran 0.46x (H100, 2026-12-06)."""
    return {v for v in combo if VARIANT_TRANSFORMATION.get(v, v) in vocabulary
            and VARIANT_TRANSFORMATION.get(v, v) not in known}


def _table(graph: Any, pattern: Any) -> list[Any]:
    """The graph's per-transformation rows on exactly this pattern (losses and failures included;
    ``median_speedup_vs_compile`` where timed), or [] from a graph that cannot answer."""
    table = getattr(graph, "table", None)
    if table is None:
        return []
    try:
        return list(table(pattern))
    except Exception:
        return []


def _measured(combos: list[tuple[str, ...]], timed: dict[str, float]) -> list[float]:
    """Each combination's product of measured speedups over the regions whose variants were all
    timed on this pattern (a region with one variant everywhere, or an untimed one, counts 1.0)."""
    measured = [1.0] * len(combos)
    for k in range(len(combos[0])):
        column = [timed.get(VARIANT_TRANSFORMATION.get(c[k], c[k])) for c in combos]
        if len({c[k] for c in combos}) > 1 and all(v is not None for v in column):
            measured = [m * v for m, v in zip(measured, column)]
    return measured
