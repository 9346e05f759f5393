"""Convolution and pooling templates: a traced ``conv`` or ``pool`` node and its elementwise epilogue.

The kernels are in ``lower/conv.py`` (implicit GEMM, transposed convolutions split by
output phase), ``lower/conv_direct.py`` (direct convolution for few channels per
group) and ``lower/pool.py`` (max / avg with PyTorch's padding, ceil_mode and divisor
rules; global pooling); their docstrings teach them. A region is the anchor plus
elementwise nodes on its output (bias, activations, residuals, per-channel scales),
applied to the accumulator before the one store; per-channel values computed from
parameters only (a batch norm's ``rsqrt(running_var + eps)``) join it too, so the
whole inference batch norm runs in the epilogue. Norms over the output need all of
it and start the next region.

Variants of the convolution: ``implicit_gemm`` (tl.dot, 3xTF32 on CUDA for fp32) and
``direct`` (no tl.dot). The default is ``direct`` when the group's GEMM is narrower
than one 16-wide tensor-core step (``tiles.direct_fits``: a depthwise conv), else
``implicit_gemm``. Where the shape makes one of them hopeless (``tiles.refused_variant``:
a tl.dot that is mostly padding, or hundreds of CUDA-core FMAs per output) it is
unavailable, so the graph's evidence (per pattern, not per shape) cannot rank it first;
in between, the other stays a combination the evidence can rank first.
"""
from __future__ import annotations

from kernelrag.draft.lower.conv import ConvSpec, render_conv
from kernelrag.draft.lower.conv_direct import render_direct_conv
from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.gemm_spec import LoweringError
from kernelrag.draft.lower.ir import FLOAT, Graph, Node, fits
from kernelrag.draft.lower.pool import PoolSpec, render_global_pool, render_pool
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates.gemm import epilogue_text, wrapper
from kernelrag.draft.lower.tiles import direct_fits, refused_variant


def _outside_value(graph: Graph, i: int, domain: tuple[int, ...]) -> bool:
    """A value these kernels can load: a constant, or a float tensor that broadcasts into the
    domain. A number read at run time (``scalar``) is not an argument of these kernels: its op
    starts an elementwise region instead of being baked in."""
    return graph[i].op == "const" or (graph[i].kind == FLOAT and graph[i].op != "scalar"
                                      and fits(graph[i].shape, domain))


class _AnchoredTemplate:
    anchor_op = ""
    single_output = True     # the launcher writes the region's last value only (see ``partition``)

    def opens(self, graph: Graph, node: Node) -> bool:
        return node.op == self.anchor_op

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not region.nodes:
            if node.op != self.anchor_op:
                return False
            region.domain = node.shape
            region.state["anchor"] = node.id
            return True
        if not is_elementwise(node):
            return False
        inside = set(region.nodes)
        domain = region.domain
        if node.shape == domain and any(i in inside for i in node.inputs):
            return all(i in inside or _outside_value(graph, i, domain) for i in node.inputs)
        # a value from parameters and constants only (rsqrt(running_var + eps)): computed in the
        # epilogue from stride-0 loads, when everything that reads it is elementwise too
        users = graph.users()
        live = {n.id for n in graph.live()}
        return (node.kind == FLOAT and fits(node.shape, domain) and node.id not in graph.outputs
                and all(i in inside or _outside_value(graph, i, domain) for i in node.inputs)
                and all(is_elementwise(graph[u]) for u in users[node.id] if u in live))

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        return False

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        if variant not in self.variants:
            return f"{self.name} has no variant {variant!r} ({', '.join(self.variants)})"
        if region.outputs != [region.nodes[-1]]:
            return f"the {self.name} region's intermediate values are needed outside it"
        if graph[region.nodes[-1]].shape != region.domain:
            return f"the {self.name} region ends on a value smaller than its output"
        return None

    def _extras(self, graph: Graph, region: Region) -> list[int]:
        later = region.nodes[1:]
        return [i for i in region.loads if any(i in graph[n].inputs for n in later)]

    def _ops(self, graph: Graph, region: Region) -> str:
        return " > ".join(dict.fromkeys(graph[n].origin or graph[n].op for n in region.nodes))


def group_gemm(graph: Graph, node: Node) -> tuple[int, int, int]:
    """(input channels per group, output channels per group, taps) from the traced shapes."""
    x, w = graph[node.inputs[0]].shape, graph[node.inputs[1]].shape
    groups = int(node.args["groups"])
    taps = 1
    for k in node.args["kernel_size"]:
        taps *= k
    if node.args["transposed"]:
        groups = x[1] if node.args["depthwise"] else groups
        return x[1] // max(groups, 1), w[1], taps
    return w[1], w[0] // max(groups, 1), taps


CHANNELS_LAST_MIN = 16     # input channels per group below which the channels-last variant is refused


class ConvTemplate(_AnchoredTemplate):
    name = "conv"
    family = "conv"
    variants = ("implicit_gemm", "channels_last", "direct")
    anchor_op = "conv"

    def default_variant(self, graph: Graph, region: Region) -> str:
        cg, fg, taps = group_gemm(graph, graph[region.state["anchor"]])
        return "direct" if direct_fits(fg, cg * taps) else "implicit_gemm"

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        node = graph[region.state["anchor"]]
        cg, fg, taps = group_gemm(graph, node)
        if variant == "channels_last" and node.args["transposed"]:
            return "the channels-last implicit GEMM renders ordinary convolutions only"
        if variant == "channels_last" and cg < CHANNELS_LAST_MIN:
            return (f"{cg} input channel(s) per group: a channels-last row of the A tile is too short to pay "
                    "for the input's transpose pass")
        return super().unavailable(graph, region, variant) or refused_variant(
            "implicit_gemm" if variant == "channels_last" else variant, fg, cg * taps)

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        node = graph[region.state["anchor"]]
        a = node.args
        extras = self._extras(graph, region)
        try:
            spec = ConvSpec(a["dims"], a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["groups"],
                            a["transposed"], a["depthwise"], a["output_padding"],
                            epilogue_text(graph, region, node.id, extras), len(extras), name=f"{name}_conv",
                            crop=tuple(a.get("crop", ())), channels_last=variant == "channels_last")
        except LoweringError as exc:
            raise ValueError(str(exc)) from None
        ops = self._ops(graph, region)
        cg, fg, taps = group_gemm(graph, node)
        if variant == "direct":
            rendered = render_direct_conv(spec)
            doc = (f"{ops}: a direct convolution ({cg} input and {fg} output channel(s) per group in the traced "
                   "shapes: a tl.dot would be mostly padding), one program per tile of output channels x output "
                   "positions, the taps unrolled over shifted windows of the same input rows, fp32 accumulation, "
                   "the epilogue on the tile: memory-bound at input + output bytes.")
        else:
            rendered = render_conv(spec)
            doc = (f"{ops}: an implicit GEMM (M = N * output positions, N = output channels per group, K = input "
                   "channels per group * kernel taps; the im2col tile is gathered as it is loaded, output positions "
                   "along the fast axis, never stored) with the epilogue applied to the accumulator: 2*M*N*K FLOPs "
                   "per group, input + weight + output bytes; tiles from the shape (tiles.CONV_TILES). "
                   + ("A transposed convolution with dilation 1 runs as one GEMM per output phase (no taps wasted). "
                      if spec.phases else "")
                   + ("Channels-last: K runs over (tap, channel) with channels fastest, the input is made "
                      "channels-last in one pass, so each A-tile row is a contiguous run of channels and reaches "
                      "tl.dot K-major. " if spec.channels_last else "")
                   + "dot precision: tf32x3 on CUDA for fp32, ieee under the CPU interpreter.")
        if spec.crop:
            doc += " The slice of the output after the convolution is folded in: only kept outputs are computed."
        return Emitted(kernels=rendered.parts, launcher=rendered.launcher + "\n\n" + wrapper(
            name, spec.name, region.loads, node.inputs[:2], extras, f"{ops} (conv template, {variant})"),
            launcher_name=name, transformations=rendered.transformations, doc=doc)


class PoolTemplate(_AnchoredTemplate):
    name = "pool"
    family = "pooling"
    variants = ("window",)
    anchor_op = "pool"

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        node = graph[region.state["anchor"]]
        a = node.args
        extras = self._extras(graph, region)
        epilogue = epilogue_text(graph, region, node.id, extras)
        ops = self._ops(graph, region)
        if a.get("global_pool"):
            rendered = render_global_pool(a["mode"], a["dims"], epilogue, len(extras), name=f"{name}_pool")
            doc = (f"{ops}: a global {a['mode']} pool, BLOCK_R rows of N * C per program each swept in one "
                   "contiguous pass, fp32 accumulation: memory-bound at input bytes.")
        else:
            try:
                spec = PoolSpec(a["dims"], a["mode"], a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                                a["ceil_mode"], a["count_include_pad"], a["divisor_override"],
                                epilogue, len(extras), name=f"{name}_pool")
            except LoweringError as exc:
                raise ValueError(str(exc)) from None
            rendered = render_pool(spec)
            doc = (f"{ops}: one program per BLOCK outputs, the window's taps unrolled, an fp32 running "
                   f"{'max (NaN wins)' if a['mode'] == 'max' else 'sum divided as PyTorch divides it'}; "
                   "memory-bound at about (input + output) bytes.")
        return Emitted(kernels=rendered.parts, launcher=rendered.launcher + "\n\n" + wrapper(
            name, f"{name}_pool", region.loads, node.inputs[:1], extras, f"{ops} (pool template)"),
            launcher_name=name, transformations=rendered.transformations, doc=doc)


register(ConvTemplate(), 21)
register(PoolTemplate(), 22)
