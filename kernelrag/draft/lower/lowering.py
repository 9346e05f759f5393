"""The entry point: a task's source lowered to one ``ModelNew`` draft, or the reason it cannot be."""
from __future__ import annotations

from kernelrag.task import Task
from kernelrag.draft.lower.build import build_graph
from kernelrag.draft.lower.values import Unsupported
from kernelrag.draft.lower.emit import render
from kernelrag.draft.lower.partition import partition
from kernelrag.draft.lower.protocol import Region
from kernelrag.types import DraftResult


def plan_task(task: "Task | str", partial: bool = False):
    """(graph, steps) for a task, planned once per task value; raises Unsupported naming what
    cannot be placed (``partial``: ops no template places stay PyTorch calls, see ``build``)."""
    task = Task.of(task)
    return task.memo(f"lowering.plan.{'partial' if partial else 'whole'}", lambda: _plan(task, partial))


def _plan(task: Task, partial: bool):
    module = task.module()
    for needed in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, needed):
            raise Unsupported(f"the task defines no {needed}")
    graph, _ = build_graph(module, partial)
    return graph, partition(graph)


def _default(graph, region: Region) -> str:
    pick = getattr(region.template, "default_variant", None)
    return pick(graph, region) if pick else region.template.variants[0]


def variant_choices(task: "Task | str", partial: bool = False) -> list[tuple[str, ...]]:
    """Every combination worth trying: one variant per region, the default first."""
    graph, steps = plan_task(task, partial)
    regions = [s for s in steps if isinstance(s, Region)]
    combos = [tuple(_default(graph, r) for r in regions)]
    for k, r in enumerate(regions):
        for v in r.template.variants:
            dominated = getattr(r.template, "dominated", None)
            if v != combos[0][k] and r.template.unavailable(graph, r, v) is None and not (
                    dominated and dominated(graph, r, v)):
                combo = list(combos[0])
                combo[k] = v
                combos.append(tuple(combo))
    return combos


def lower(task: "Task | str", pattern: str = "", variants: tuple[str, ...] | None = None,
          partial: bool = False) -> DraftResult:
    """A composed draft for the task (``variants``: one per region; None: each template's default).

    ``partial``: the ops no template places stay PyTorch calls in ``forward`` and are named in
    ``DraftResult.unplaced``; such a draft is a starting point for the LLM drafter's prompt, not a
    candidate (the offline drafter never asks for one)."""
    try:
        task = Task.of(task)
        graph, steps = plan_task(task, partial)
        regions = [s for s in steps if isinstance(s, Region)]
        if not regions:
            raise Unsupported("the task computes nothing a kernel could do (layout ops only)")
        chosen = list(variants) if variants else [_default(graph, r) for r in regions]
        if len(chosen) != len(regions):
            raise Unsupported(f"{len(chosen)} variants given for {len(regions)} regions")
        emitted = []
        for k, (r, v) in enumerate(zip(regions, chosen)):
            why = r.template.unavailable(graph, r, v)
            if why:
                raise Unsupported(why)
            emitted.append(r.template.emit(graph, r, v, f"{r.template.name}_{k}"))
        trans: list[str] = []
        for e in emitted:
            trans += [t for t in e.transformations if t not in trans]
        if len(regions) < sum(1 for n in graph.live() if n.op in ("reduce", "scan")) + 1 and len(graph.live()) > 2:
            trans.append("epilogue_fusion") if "epilogue_fusion" not in trans else None
        title = pattern or " > ".join(r.describe(graph) for r in regions)
        source = render(task.source, graph, steps, emitted, title, chosen, trans)
    except Unsupported as exc:
        return DraftResult(ok=False, method="lowering", pattern=pattern, reason=f"cannot lower the task: {exc}")
    except Exception as exc:     # the task's own code failed on the meta device
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return DraftResult(ok=False, method="lowering", pattern=pattern,
                           reason=f"could not lower the task ({type(exc).__name__}: {first})")
    plan = "; ".join(f"{r.describe(graph)} [{v}]" for r, v in zip(regions, chosen))
    left = f"; left in PyTorch: {', '.join(graph.unplaced)}" if graph.unplaced else ""
    return DraftResult(ok=True, source=source, method="lowering", transformations=trans, pattern=pattern,
                       reason=f"composed {len(regions)} kernel(s) from templates: {plan}{left}",
                       unplaced=list(graph.unplaced))
