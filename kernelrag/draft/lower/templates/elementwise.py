"""Elementwise template: any chain over broadcast operands, one program per BLOCK outputs.

The flattened domain index is decomposed into per-dim indices once per program, and
each operand is read through its own strides (0 along a broadcast dim), so
parameters, buffers, row statistics and scalars broadcast in without a copy. Each
operand is read once and each output written once: ``(reads + writes) * numel *
element_size`` bytes, memory-bound for any chain short of ~50 ops per element; every
intermediate stays in fp32 registers. Fusion point: any elementwise node whose shape
broadcasts to the domain joins; a reduction or scan on the domain adopts the whole
region as its prologue (``rowwise``).
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise, node_expr
from kernelrag.draft.lower.ir import Graph, Node, broadcast
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates import common as C

BLOCK = 1024


class ElementwiseTemplate:
    name = "elementwise"
    family = "elementwise"
    variants = ("block1024",)

    def opens(self, graph: Graph, node: Node) -> bool:
        return is_elementwise(node) or node.op == "iota"

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not (is_elementwise(node) or node.op == "iota"):
            return False
        try:
            domain = broadcast(region.domain, node.shape) if region.nodes else node.shape
        except ValueError:
            return False
        if region.nodes and len(node.shape) > len(region.domain) and any(
                graph[i].shape != domain for i in region.nodes if i in region.state.get("escaping", ())):
            return False
        region.domain = domain
        return True

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        return False

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        return None if variant in self.variants else f"elementwise has no variant {variant!r}"

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        rank = len(region.domain)
        loads, outs = region.loads, region.outputs
        for nid in outs:
            if graph[nid].shape != region.domain:
                raise ValueError(f"elementwise output {graph[nid].label()} is smaller than the domain")
        scalar = [C.is_scalar(graph, n) for n in loads]
        args = [C.operand_arg(graph, k, n, f"operand {k} ({graph[n].origin or graph[n].op})") for k, n in enumerate(loads)]
        args += [(f"out{k}_ptr", f"output {k}") for k in range(len(outs))]
        args += [(f"n{d}", f"domain size of dim {d}") for d in range(rank)]
        args += [(", ".join(f"in{k}_s{d}" for d in range(rank)), f"operand {k}'s strides (0: broadcast)")
                 for k in range(len(loads)) if rank and not scalar[k]]
        args += [(", ".join(f"out{k}_s{d}" for d in range(rank)), f"output {k}'s strides") for k in range(len(outs))
                 if rank]
        args += [("n_elements", "elements in the domain"), ("BLOCK: tl.constexpr", "elements per program")]
        body = ["    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                "    mask = offs < n_elements   # the last program covers the tail", "    rest = offs"]
        for d in reversed(range(rank)):
            body += [f"    i{d} = rest % n{d}", f"    rest = rest // n{d}"]
        names = C.const_names(graph, [i for n in region.nodes for i in graph[n].inputs])
        for k, nid in enumerate(loads):
            if scalar[k]:
                names[nid] = f"in{k}"
                continue
            off = " + ".join(f"i{d} * in{k}_s{d}" for d in range(rank)) or "offs * 0"
            body.append(f"    v{nid} = " + C.load_expr(graph[nid].kind, f"in{k}_ptr + {off}", "mask"))
            names[nid] = f"v{nid}"
        for nid in region.nodes:
            node = graph[nid]
            names[nid] = f"i{node.args['dim']}" if node.op == "iota" else f"v{nid}"
            if node.op != "iota":
                body.append(f"    v{nid} = {node_expr(graph, node, names)}")
        for k, nid in enumerate(outs):
            off = " + ".join(f"i{d} * out{k}_s{d}" for d in range(rank)) or "offs * 0"
            body.append(f"    tl.store(out{k}_ptr + {off}, {C.store_value(names[nid], graph[nid].kind, f'out{k}_ptr')}, "
                        "mask=mask)")
        kname = f"{name}_kernel"
        kernel = f"@triton.jit\ndef {kname}(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"
        params = [f"a{k}" for k in range(len(loads))]
        tensors = C.tensor_params(graph, loads, params)
        if not tensors:
            raise ValueError(f"elementwise region {region.describe(graph)} reads no tensor")
        ref = C.float_ref(graph, loads, params)
        lines = C.launcher_head(name, params, f"{region.describe(graph)}; one program per {BLOCK} outputs.")
        lines += C.domain_lines(tensors, rank)
        out_names = [f"out{k}" for k in range(len(outs))]
        for k, nid in enumerate(outs):
            lines.append(f"    out{k} = torch.empty(domain, dtype={C.dtype_code(graph[nid].kind, ref)}, "
                         f"device={tensors[0]}.device)")
        lines += ["    n_elements = 1", "    for s in domain:", "        n_elements *= s"]
        call = ", ".join(C.call_values(graph, loads, params) + out_names + ["*domain"]
                         + [f"*{p}.expand(domain).stride()" for p in tensors]
                         + [f"*{o}.stride()" for o in out_names] + ["n_elements"])
        lines += ["    if n_elements > 0:",
                  f"        {kname}[(triton.cdiv(n_elements, {BLOCK}),)]({call}, BLOCK={BLOCK})",
                  f"    return {', '.join(out_names)}{',' if len(outs) == 1 else ''}"]
        reads = len(tensors)
        doc = (f"{region.describe(graph)}: {reads} operand read(s) and {len(outs)} write(s) per element, "
               "broadcast operands read through stride-0 dims.")
        return Emitted([kernel], "\n".join(lines) + "\n", name, ["elementwise_fusion", "fp32_accumulation"], doc)


ELEMENTWISE = register(ElementwiseTemplate(), priority=90)
