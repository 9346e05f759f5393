"""What a template is, what a region is, and the registry the partitioner asks.

A *region* is the part of the graph one template turns into one launcher (one or
more kernels). The partitioner walks the live nodes in order and keeps one region
open: the open region's template is asked whether the next node may join it (a
fusion point); if not, any template may adopt the open region together with the
node (a pointwise region becomes the prologue of a reduction); otherwise the region
is closed and the first template in priority order that opens the node starts the
next one. Values that cross a region boundary are materialised in HBM; layout nodes
(``view``) stay in PyTorch between launchers, where they are free.

Adding a family (GEMM, convolution, pooling...): write a class with the methods of
``Template`` in ``templates/<family>.py`` and call ``register(MyTemplate(), priority)``
at the end of that module; add the module to the import list of ``families``. ``opens``
claims the anchor op (``matmul``), ``absorbs`` accepts the epilogue nodes the tile can
hold (elementwise ops on the output frame: ``exprs.node_expr`` turns any of them into a
``tl`` expression; ``templates.common`` gives the frames, broadcast operand loads and
launcher pieces the built-in families use), ``emit`` returns
the kernel text and the launcher. A launcher takes the region's ``loads`` (tensors, in
order) and returns the tuple of its ``outputs``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelrag.draft.lower.ir import Graph, Node


# The vocabulary transformation each template variant stands for: the graph's evidence is keyed
# by it, the templates name it in a kernel's transformations and ``rank`` reads it back.
VARIANT_TRANSFORMATION = {"registers": "row_in_registers", "looped": "recompute_over_store",
                          "split": "two_pass_reduction", "column": "tiling", "chunked": "chunked_rows",
                          "three_pass": "separate_passes_l2", "coop": "cooperative_rows", "piped": "pipelined_rows",
                          "block1024": "elementwise_fusion",
                          "direct": "direct_convolution", "ieee": "ieee_fp32_dot",
                          "per_channel": "per_channel_hoisting", "hoisted": "broadcast_hoisting",
                          "rows_after": "unfused_row_reduction"}


@dataclass
class Region:
    template: "Template"
    nodes: list[int] = field(default_factory=list)     # ids computed here, in order
    domain: tuple[int, ...] = ()                       # traced iteration space
    reduced: tuple[int, ...] = ()                      # dims of ``domain`` one program reduces or scans
    state: dict[str, Any] = field(default_factory=dict)   # template-private planning data
    loads: list[int] = field(default_factory=list)     # ids read from outside (filled by the partitioner)
    outputs: list[int] = field(default_factory=list)   # ids needed outside (filled by the partitioner)

    def outside_inputs(self, graph: Graph) -> list[int]:
        """The ids its nodes read that are computed outside it (constants are literals), first read first."""
        inside = set(self.nodes)
        return list(dict.fromkeys(i for nid in self.nodes for i in graph[nid].inputs
                                  if i not in inside and graph[i].op != "const"))

    def describe(self, graph: Graph) -> str:
        ops = [graph[i].origin or graph[i].op for i in self.nodes]
        seen: list[str] = []
        for op in ops:
            if op not in seen:
                seen.append(op)
        return f"{self.template.name}: {' > '.join(seen)}"


# The first line of a module-level ``CONFIGS`` text that gives way: a module holds one ``CONFIGS``
# list, and ``emit`` keeps the first region's that does not start with this line (a row-wise
# region's, whose launcher needs its own), else the first. A launcher whose list this is reads
# the module's list only when its keys are its own.
YIELDING_CONFIGS = "# CONFIGS: yields to another region's list in the same module"


@dataclass
class Emitted:
    kernels: list[str]            # @triton.jit source texts (helpers first) and module-level tables, written once
    launcher: str                 # the Python launcher's source text
    launcher_name: str
    transformations: list[str]    # ids from memory/data/transformations.toml
    doc: str                      # one paragraph for the module docstring: technique, bytes, FLOPs


class Template(Protocol):
    name: str                     # "rowwise"
    family: str                   # "reduction", "elementwise", "gemm"...
    variants: tuple[str, ...]     # the first is the default

    def opens(self, graph: Graph, node: Node) -> bool: ...

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool: ...

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool: ...

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None: ...

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted: ...


_REGISTRY: list[tuple[int, Template]] = []


def register(template: Template, priority: int) -> Template:
    """Add a template; lower priority numbers are asked first when a region opens."""
    if any(t.name == template.name for _, t in _REGISTRY):
        raise ValueError(f"a template named {template.name!r} is already registered")
    _REGISTRY.append((priority, template))
    _REGISTRY.sort(key=lambda pt: pt[0])
    return template


def registered() -> list[Template]:
    """The templates registered so far, in priority order (``families.templates()`` loads them all)."""
    return [t for _, t in _REGISTRY]
