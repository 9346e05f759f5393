"""Which reductions of a long row share one pass over it: the looped path's schedule.

A row longer than the registers hold is read once per pass, from HBM when the rows
in flight exceed L2 (2,000 resident programs x a 128 KB row is 256 MB, five times the
H200's L2), so the passes, not the FLOPs, set the time. Two rules cut them:

  levels     a reduction needs only the reductions in its cone; all reductions of one
             dependency level run in the same pass (cross-entropy's max, picked logit and
             row mean: one pass, not three);
  riders     a reduction that depends on another only through a form with a one-pass
             rewrite rides in its base's pass:
             ``online_softmax``  sum(exp(y - max(y))): a running max per lane, the running
                                 sum rescaled by exp(old max - new max) when it grows;
             ``shifted_var``     mean((y - mean(y)) ** 2): per lane, sums of (y - k) and
                                 (y - k) ** 2 about k, the lane's first value (a sample of the
                                 row, so no cancellation), combined once the mean is known.

Softmax then takes two passes (statistics, output) instead of three, a norm two instead
of three, a log-softmax-KL pair two instead of five.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Region

ONLINE_SOFTMAX, SHIFTED_VAR = "online_softmax", "shifted_var"


def cone(graph: Graph, nid: int, inside: set[int]) -> list[int]:
    """Region nodes ``nid``'s inputs depend on (not crossing a reduction), nearest first."""
    out: list[int] = []
    stack = list(graph[nid].inputs)
    while stack:
        i = stack.pop()
        if i in inside and i not in out:
            out.append(i)
            if graph[i].op != "reduce":
                stack.extend(graph[i].inputs)
    return out


@dataclass(frozen=True)
class Rider:
    kind: str        # ONLINE_SOFTMAX or SHIFTED_VAR
    base: int        # the max (or mean) whose pass it shares
    source: int      # y: the lane value both reduce


def _rider(graph: Graph, region: Region, nid: int) -> Rider | None:
    inside = set(region.nodes)
    node = graph[nid]
    if node.args["fn"] not in ("sum", "mean"):
        return None
    x = graph[node.inputs[0]]
    if x.id not in inside:
        return None
    if x.op == "exp" and x.inputs[0] in inside and graph[x.inputs[0]].op == "sub":
        kind, want, diff = ONLINE_SOFTMAX, "max", graph[x.inputs[0]]
    elif x.op == "mul" and len(x.inputs) == 2 and x.inputs[0] == x.inputs[1] and x.inputs[0] in inside \
            and graph[x.inputs[0]].op == "sub":
        kind, want, diff = SHIFTED_VAR, "mean", graph[x.inputs[0]]
    else:
        return None
    if len(diff.inputs) != 2 or diff.inputs[1] not in inside:
        return None
    y, base = diff.inputs
    b = graph[base]
    if b.op != "reduce" or b.args["fn"] != want or b.inputs[0] != y or b.args.get("denom") is not None:
        return None
    return Rider(kind, base, y)


def plan_passes(graph: Graph, region: Region, ride: bool = True) -> tuple[list[list[int]], dict[int, Rider]]:
    """(the region's reductions grouped by pass, in pass order; the riders among them).
    ``ride=False``: no reduction rides another's pass, each waits for the passes it needs
    (the ``three_pass`` variant)."""
    inside = set(region.nodes)
    level: dict[int, int] = {}
    riders: dict[int, Rider] = {}
    for nid in region.nodes:
        if graph[nid].op != "reduce":
            continue
        rider = _rider(graph, region, nid) if ride else None
        deps = {c for c in cone(graph, nid, inside) if graph[c].op == "reduce"}
        if rider is not None and rider.base in level and all(level[d] < level[rider.base]
                                                              for d in deps - {rider.base}):
            riders[nid] = rider
            level[nid] = level[rider.base]
        else:
            level[nid] = 1 + max((level[d] for d in deps), default=-1)
    passes = [[n for n in level if level[n] == k] for k in range(max(level.values(), default=-1) + 1)]
    return passes, riders
