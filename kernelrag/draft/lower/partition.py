"""The live graph grouped into regions (one launcher each) and layout steps between them.

One region is open at a time (see ``protocol``). A ``view`` node is a step in
``forward``: when its input is computed by the open region, the region closes and
the value is materialised first, so a view only ever sees a real tensor. A ``scalar``
(a number read at run time) is a step in ``forward`` too, handed to kernels by value,
and so is a ``torch`` node (an op a partial lowering leaves to PyTorch). A node that
no template opens is named in the error, which becomes the draft's reason.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.values import Unsupported
from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.families import templates
from kernelrag.draft.lower.protocol import Region


@dataclass
class ViewStep:
    node: int          # the view node, done in PyTorch between launchers


def sink_views(graph: Graph) -> None:
    """``f(view(x))`` becomes ``view(f(x))`` for a pointwise ``f`` of one tensor whose view has no
    other user and keeps every element (a reshape, a permute). A view closes the open region, so
    group norm's SiLU after its (N, G, C/G, HW) -> (N, C, H, W) reshape was a second kernel (one
    more write and read of the tensor, 8 bytes per fp32 element); before the view it is the norm
    kernel's epilogue. The two nodes swap roles in place, so the node order stays topological."""
    users = graph.users()
    for node in graph.live():
        tensors = [i for i in node.inputs if graph[i].op not in ("const", "scalar")]
        if not is_elementwise(node) or len(tensors) != 1 or graph[tensors[0]].op != "view":
            continue
        view = graph[tensors[0]]
        source = graph[view.inputs[0]]
        if users[view.id] != [node.id] or source.is_source or math.prod(view.shape) != math.prod(source.shape):
            continue          # a slice (fewer elements) keeps ``f`` after it: no work on dropped elements
        view_args, view_shape, shape_refs = view.args, node.shape, view.inputs[1:]   # refs: ``{1}.shape``
        view.op, view.args, view.origin, view.kind = node.op, node.args, node.origin, node.kind
        view.inputs = [source.id if i == view.id else i for i in node.inputs]
        view.shape = source.shape
        node.op, node.args, node.inputs, node.shape = "view", view_args, [view.id] + shape_refs, view_shape


def partition(graph: Graph) -> list[Region | ViewStep]:
    """The regions and view steps of ``graph``. A template that writes only its region's last
    value (``single_output``) can absorb a node greedily that leaves an earlier value needed
    outside (the GEMM took ``y * y`` of an L2 norm whose row sum it could not hold, while the
    division needed ``y`` itself): the node after the first escaping value then opens the next
    region instead, and the graph is partitioned again. Each attempt works on a copy, since a
    partition rewrites the graph (a squeeze it cannot place becomes a view, a row partial is a
    new node); the one kept becomes the graph."""
    sink_views(graph)
    stops: set[int] = set()
    while True:
        trial = copy.deepcopy(graph)
        steps = _partition(trial, stops)
        cut = next((c for c in map(_first_past_escape, steps) if c is not None and c not in stops), None)
        if cut is None:
            vars(graph).update(vars(trial))
            return steps
        stops.add(cut)


def _first_past_escape(step: "Region | ViewStep") -> int | None:
    if not isinstance(step, Region) or not getattr(step.template, "single_output", False):
        return None
    first = min((step.nodes.index(o) for o in step.outputs), default=len(step.nodes) - 1)
    return step.nodes[first + 1] if first + 1 < len(step.nodes) else None


def _partition(graph: Graph, stops: set[int]) -> list[Region | ViewStep]:
    steps: list[Region | ViewStep] = []
    open_region: Region | None = None
    placed: dict[int, Region] = {}
    for node in graph.live():
        if node.is_source:
            continue
        if node.op == "squeeze_row" and open_region and placed.get(node.inputs[0]) is open_region \
                and open_region.template.absorbs(graph, open_region, node):
            # asked once: a template may close its region on what it absorbs (a GEMM tile
            # after its row reduction's squeeze), so a second ``absorbs`` would refuse it
            open_region.nodes.append(node.id)
            placed[node.id] = open_region
            continue
        if node.op in ("view", "scalar", "torch", "squeeze_row"):
            if node.op == "squeeze_row":
                dims = ", ".join(str(d) for d in node.args["dims"])
                node.op, node.args = "view", {"code": f"{{0}}.reshape({{0}}.shape[:{min(node.args['dims'])}] + "
                                                      f"{{0}}.shape[{max(node.args['dims']) + 1}:])"
                                              if dims else "{0}"}
            if open_region and any(placed.get(i) is open_region for i in node.inputs):
                open_region = None
            if open_region is not None:      # a view of a ready tensor goes before the open region
                steps.insert(steps.index(open_region), ViewStep(node.id))
            else:
                steps.append(ViewStep(node.id))
            continue
        if open_region is not None and node.id in stops:
            open_region = None
        if open_region is not None:
            partial = getattr(open_region.template, "row_partial", None)
            part = partial(graph, open_region, node) if partial else None
            if part is not None:     # the node's share joins the open region; the node itself reduces it
                open_region.nodes.append(part)
                placed[part] = open_region
            if open_region.template.absorbs(graph, open_region, node):
                open_region.nodes.append(node.id)
                placed[node.id] = open_region
                continue
            adopter = next((t for t in templates() if t.adopts(graph, open_region, node)), None)
            if adopter is not None:
                open_region.nodes.append(node.id)
                placed[node.id] = open_region
                continue
        template = next((t for t in templates() if t.opens(graph, node)), None)
        if template is None:
            raise Unsupported(f"no template places {node.origin or node.op} (node {node.label()})")
        open_region = Region(template=template)
        if not template.absorbs(graph, open_region, node):     # an empty region takes the node's frame
            raise Unsupported(f"template {template.name} opened on {node.label()} but did not take it")
        open_region.nodes.append(node.id)
        placed[node.id] = open_region
        steps.append(open_region)
    users = graph.users()
    live = {n.id for n in graph.live()}
    for step in steps:
        if isinstance(step, Region):
            inside = set(step.nodes)
            step.loads += [i for i in step.outside_inputs(graph) if i not in step.loads]
            step.outputs = [nid for nid in step.nodes
                            if nid in graph.outputs or any(u not in inside for u in users[nid] if u in live)]
    return steps

