"""Memory picks the variant: the graph's evidence orders the template-variant combinations.

Each variant stands for one transformation of the vocabulary (``VARIANT_TRANSFORMATION``).
``ReasoningGraph.suggest`` ranks transformations for the task's pattern, falling back
to similar patterns (same category, shared ops); a combination scores the sum of its
variants' scores, and ties keep the templates' default first. With no graph (or no
evidence yet) the order is the default one, so every round still tries an untried
combination.
"""
from __future__ import annotations

from typing import Any

VARIANT_TRANSFORMATION = {"registers": "row_in_registers", "looped": "recompute_over_store",
                          "split": "two_pass_reduction", "column": "tiling",
                          "block1024": "elementwise_fusion",
                          "direct": "direct_convolution", "ieee": "ieee_fp32_dot",
                          "per_channel": "per_channel_hoisting"}


def lower_order(combos: list[tuple[str, ...]], pattern: Any, graph: Any = None) -> list[tuple[str, ...]]:
    if graph is None or not getattr(pattern, "known", False) or len(combos) < 2:
        return list(combos)
    try:
        scores = {s.transformation: s.score for s in graph.suggest(pattern, k=32)}
    except Exception:            # a graph that cannot answer leaves the default order
        return list(combos)

    def score(combo: tuple[str, ...]) -> float:
        return sum(scores.get(VARIANT_TRANSFORMATION.get(v, v), 0.0) for v in combo)

    order = sorted(range(len(combos)), key=lambda k: (-score(combos[k]), k))
    return [combos[k] for k in order]
