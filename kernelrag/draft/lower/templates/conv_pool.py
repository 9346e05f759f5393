"""Convolution and pooling templates: a traced ``conv`` or ``pool`` node and its elementwise epilogue.

The kernels are in ``lower/conv.py`` (implicit GEMM, transposed convolutions by a
divisibility-masked gather) and ``lower/pool.py`` (max / avg with PyTorch's padding,
ceil_mode and divisor rules); their docstrings teach them. A region is the anchor
plus elementwise nodes on its output (bias, activations, residuals, per-channel
scales), applied to the accumulator before the one store. Norms over the output
need all of it and start the next region.
"""
from __future__ import annotations

from kernelrag.draft.lower.conv import ConvSpec, render_conv
from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.gemm_spec import LoweringError
from kernelrag.draft.lower.ir import Graph, Node
from kernelrag.draft.lower.pool import PoolSpec, render_pool
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates.gemm import epilogue_text, fits, wrapper

_IMPORTS = "import torch\nimport triton\nimport triton.language as tl\n\n\n"


def _split(rendered_source: str) -> tuple[str, str]:
    """(the @triton.jit kernel text, the launcher text) of a rendered module."""
    body = rendered_source[len(_IMPORTS):] if rendered_source.startswith(_IMPORTS) else rendered_source
    cut = body.index("\n\n\ndef ")
    return body[:cut].strip() + "\n", body[cut:].strip() + "\n"


class _AnchoredTemplate:
    anchor_op = ""

    def opens(self, graph: Graph, node: Node) -> bool:
        return node.op == self.anchor_op

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not region.nodes:
            if node.op != self.anchor_op:
                return False
            region.domain = node.shape
            region.state["anchor"] = node.id
            return True
        inside = set(region.nodes)
        # a number read at run time (``scalar``) is not an argument of these kernels: its op starts
        # an elementwise region instead of being baked in
        return (is_elementwise(node) and node.shape == region.domain and any(i in inside for i in node.inputs)
                and all(i in inside or graph[i].op == "const" or (graph[i].kind == "float" and graph[i].op != "scalar"
                                                                  and fits(graph[i].shape, region.domain))
                        for i in node.inputs))

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        return False

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        if variant not in self.variants:
            return f"{self.name} has no variant {variant!r}"
        if region.outputs != [region.nodes[-1]]:
            return f"the {self.name} region's intermediate values are needed outside it"
        return None

    def _extras(self, graph: Graph, region: Region) -> list[int]:
        later = region.nodes[1:]
        return [i for i in region.loads if any(i in graph[n].inputs for n in later)]


class ConvTemplate(_AnchoredTemplate):
    name = "conv"
    family = "conv"
    variants = ("implicit_gemm",)
    anchor_op = "conv"

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        node = graph[region.state["anchor"]]
        a = node.args
        extras = self._extras(graph, region)
        try:
            spec = ConvSpec(a["dims"], a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["groups"],
                            a["transposed"], a["depthwise"], a["output_padding"],
                            epilogue_text(graph, region, node.id, extras), len(extras), name=f"{name}_conv")
        except LoweringError as exc:
            raise ValueError(str(exc)) from None
        kernel, launcher = _split(render_conv(spec).source)
        ops = " > ".join(dict.fromkeys(graph[n].origin or graph[n].op for n in region.nodes))
        doc = (f"{ops}: an implicit GEMM (M = N * output positions, N = output channels per group, K = input "
               "channels per group * kernel taps; the im2col tile is gathered as it is loaded, never stored) with "
               "the epilogue applied to the accumulator: 2*M*N*K FLOPs per group, input + weight + output bytes. "
               "dot precision: tf32x3 on CUDA for fp32, ieee under the CPU interpreter.")
        return Emitted(kernels=[kernel], launcher=launcher + "\n\n" + wrapper(
            name, spec.name, region.loads, node.inputs[:2], extras, f"{ops} (conv template)"),
            launcher_name=name, transformations=render_conv(spec).transformations, doc=doc)


class PoolTemplate(_AnchoredTemplate):
    name = "pool"
    family = "pooling"
    variants = ("window",)
    anchor_op = "pool"

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        node = graph[region.state["anchor"]]
        a = node.args
        extras = self._extras(graph, region)
        try:
            spec = PoolSpec(a["dims"], a["mode"], a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                            a["ceil_mode"], a["count_include_pad"], a["divisor_override"],
                            epilogue_text(graph, region, node.id, extras), len(extras), name=f"{name}_pool")
        except LoweringError as exc:
            raise ValueError(str(exc)) from None
        rendered = render_pool(spec)
        kernel, launcher = _split(rendered.source)
        ops = " > ".join(dict.fromkeys(graph[n].origin or graph[n].op for n in region.nodes))
        doc = (f"{ops}: one program per BLOCK outputs, the window's taps unrolled, an fp32 running "
               f"{'max (NaN wins)' if a['mode'] == 'max' else 'sum divided as PyTorch divides it'}; memory-bound "
               "at about (input + output) bytes.")
        return Emitted(kernels=[kernel], launcher=launcher + "\n\n" + wrapper(
            name, spec.name, region.loads, node.inputs[:1], extras, f"{ops} (pool template)"),
            launcher_name=name, transformations=rendered.transformations, doc=doc)


register(ConvTemplate(), 21)
register(PoolTemplate(), 22)
