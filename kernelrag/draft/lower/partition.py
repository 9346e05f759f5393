"""The live graph grouped into regions (one launcher each) and layout steps between them.

One region is open at a time (see ``protocol``). A ``view`` node is a step in
``forward``: when its input is computed by the open region, the region closes and
the value is materialised first, so a view only ever sees a real tensor. A ``scalar``
(a number read at run time) is a step in ``forward`` too, handed to kernels by value,
and so is a ``torch`` node (an op a partial lowering leaves to PyTorch). A node that
no template opens is named in the error, which becomes the draft's reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelrag.draft.lower.values import Unsupported
from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.families import templates
from kernelrag.draft.lower.protocol import Region


@dataclass
class ViewStep:
    node: int          # the view node, done in PyTorch between launchers


def partition(graph: Graph) -> list[Region | ViewStep]:
    steps: list[Region | ViewStep] = []
    open_region: Region | None = None
    placed: dict[int, Region] = {}
    for node in graph.live():
        if node.is_source:
            continue
        if node.op in ("view", "scalar", "torch") or (node.op == "squeeze_row" and not (
                open_region and node.inputs[0] in placed and placed[node.inputs[0]] is open_region
                and open_region.template.absorbs(graph, open_region, node))):
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
            for nid in step.nodes:
                for i in graph[nid].inputs:
                    if i not in inside and i not in step.loads and graph[i].op != "const":
                        step.loads.append(i)
            step.outputs = [nid for nid in step.nodes
                            if nid in graph.outputs or any(u not in inside for u in users[nid] if u in live)]
    return steps

