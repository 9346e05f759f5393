"""Elementwise template: any chain over broadcast operands, one program per BLOCK outputs.

The flattened domain index is decomposed into per-dim indices, and each operand is
read through its own strides (0 along a broadcast dim), so
parameters, buffers, row statistics, scalars and views (a slice or chunk taken in
``forward`` is a pointer with an offset and its strides) come in without a copy. A
``cat`` or ``stack`` is a per-lane choice of which operand to read at which offset
(``lanes``), so the pieces are never materialised either. Each operand is read once
and each output written once: ``(reads + writes) * numel * element_size`` bytes,
memory-bound for any chain short of ~50 ops per element; every intermediate stays in
fp32 registers. The domain's sizes are compile-time constants (one compile per shape):
a lane's ``%`` and ``//`` by a runtime int64 size cost tens of instructions each, which
made a rank-4 chain such as rotary embedding bound by integer math (0.71x torch.compile,
H200, 2026-12-04), where constant sizes compile to shifts and multiplies and leave the
lanes' offsets analysable, so contiguous operands load as 16-byte vectors. An operand laid
out as the domain (``IN{k}_FLAT``, checked by the launcher: its strides are the contiguous
ones of the domain's trailing dims, as a contiguous input, a chunk of one or a trailing
table is) is read at the flat lane index instead of through its strides, and the outputs,
allocated contiguous, are written there: rotary embedding's eight operands spent about
thirty integer multiply-adds a lane on offsets. Lanes index in int32 unless an offset may
pass 2**31. Fusion point: any elementwise node or cat whose shape broadcasts to
the domain joins; a reduction or scan on the domain adopts a region without cats as
its prologue (``rowwise``).
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.ir import Graph, Node, broadcast
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.lanes import Lanes, frame_shapes, leaves, shape_lines

BLOCK = 1024


class ElementwiseTemplate:
    name = "elementwise"
    family = "elementwise"
    variants = ("block1024",)

    def opens(self, graph: Graph, node: Node) -> bool:
        return self._placeable(node)

    @staticmethod
    def _placeable(node: Node) -> bool:
        return is_elementwise(node) or node.op in ("iota", "cat")

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not self._placeable(node):
            return False
        nodes = region.nodes + [node.id]
        if node.op == "cat" and not all(leaves(graph, set(nodes), [p]) for p in node.inputs):
            return False             # a piece of numbers only has no shape the launcher could read
        try:                         # a cat's pieces are computed in their own frames, not the domain's
            domain = broadcast(*frame_shapes(graph, nodes))
        except ValueError:
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
        cats = [n for n in region.nodes if graph[n].op == "cat"]
        scalar = [C.is_scalar(graph, n) for n in loads]
        ranks = [len(graph[n].shape) for n in loads]
        args = [C.operand_arg(graph, k, n, f"operand {k} ({graph[n].origin or graph[n].op})") for k, n in enumerate(loads)]
        args += [(f"out{k}_ptr", f"output {k}") for k in range(len(outs))]
        args += [(f"n{d}: tl.constexpr", f"domain size of dim {d}: a constant, so / and % are shifts and multiplies")
                 for d in range(1, rank)]
        # constants, as the sizes are: each piece's lane mask (i < offset) is then fixed when the
        # kernel compiles, as in torch.compile's kernels (rotary_embedding_qk: 0.82x it with them
        # passed at run time, H200 2026-12-05)
        args += [(", ".join(f"cat{j}_o{p}: tl.constexpr" for p in range(1, len(graph[c].inputs))),
                  f"where each piece of cat {c} after the first starts along its dim (constants)")
                 for j, c in enumerate(cats) if not graph[c].args["stack"]]
        args += [(", ".join(f"in{k}_s{d}" for d in range(ranks[k])), f"operand {k}'s strides (0: broadcast)")
                 for k in range(len(loads)) if ranks[k] and not scalar[k]]
        flat = [k for k in range(len(loads)) if ranks[k] and not scalar[k]]
        args += [("n_elements", "elements in the domain")]
        args += [(f"IN{k}_FLAT: tl.constexpr", f"operand {k} is laid out as the domain: read at the flat index")
                 for k in flat]
        args += [("BLOCK: tl.constexpr", "elements per program"),
                 ("INDEX_64: tl.constexpr", "an offset may pass 2**31: index in int64")]
        body = ["    if INDEX_64:",
                "        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                "    else:   # int32 lanes: half the registers and instructions of int64 index math",
                "        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
                "    mask = offs < n_elements   # the last program covers the tail", "    rest = offs"]
        for d in reversed(range(1, rank)):
            body += [f"    i{d} = rest % n{d}", f"    rest = rest // n{d}"]
        if rank:
            body.append("    i0 = rest")
        lanes = Lanes(graph, loads, cats, rank, flat=True)
        for k, nid in enumerate(outs):      # the launcher allocates the outputs contiguous: the lane index
            value = lanes.value(nid)
            lanes.lines.append(f"    tl.store(out{k}_ptr + offs, {C.store_value(value, graph[nid].kind, f'out{k}_ptr')}, "
                               "mask=mask)")
        body += lanes.lines
        kname = f"{name}_kernel"
        kernel = f"@triton.jit\ndef {kname}(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"
        params = [f"a{k}" for k in range(len(loads))]
        tensors = C.tensor_params(graph, loads, params)
        if not tensors:
            raise ValueError(f"elementwise region {region.describe(graph)} reads no tensor")
        ref = C.float_ref(graph, loads, params)
        lines = C.launcher_head(name, params, f"{region.describe(graph)}; one program per {BLOCK} outputs.")
        ranked = ", ".join(f"({p}, {r})" for p, r, s in zip(params, ranks, scalar) if not s)
        lines += [f"    for t, r in ({ranked},):   # each operand's strides are passed for its traced rank",
                  "        if t.dim() != r:",
                  "            raise ValueError(f\"an operand of rank {t.dim()} where the task traced rank {r}\")"]
        inside = set(region.nodes)
        shape_of = {n: f"{p}.shape" for n, p in zip(loads, params)} | {c: f"sh{c}" for c in cats}
        lines += shape_lines(graph, inside, cats, shape_of)
        top = leaves(graph, inside, outs)
        lines += [f"    domain = _broadcast({', '.join(shape_of[i] for i in top)})",
                  f"    if len(domain) != {rank}:",
                  f"        raise ValueError(f\"operands broadcast to {{tuple(domain)}}, expected rank {rank}\")"]
        out_names = [f"out{k}" for k in range(len(outs))]
        for k, nid in enumerate(outs):
            lines.append(f"    out{k} = torch.empty(domain, dtype={C.dtype_code(graph[nid].kind, ref)}, "
                         f"device={tensors[0]}.device)")
        lines += ["    n_elements = 1", "    for s in domain:", "        n_elements *= s"]
        lines.append(f"    strides = [0 if n == 1 else s for t in ({', '.join(tensors)},) "
                     "for n, s in zip(t.shape, t.stride())]   # 0: broadcast")
        lines.append(f"    index_64 = n_elements >= 2**31 or _wide({', '.join(tensors + out_names)})"
                     "   # the farthest offset read or written")
        if flat:    # laid out as the domain: its strides (0 where broadcast) are the domain's contiguous ones
            at = {k: sum(ranks[j] for j in range(k) if not scalar[j]) for k in flat}     # its place in ``strides``
            checks = ", ".join(f"strides[{at[k]}:{at[k] + ranks[k]}] == cont[{rank - ranks[k]}:]" for k in flat)
            lines += ["    cont = _contiguous(domain)", f"    flat = ({checks},)"]
        call = ", ".join(C.call_values(graph, loads, params) + out_names + (["*domain[1:]"] if rank > 1 else [])
                         + [f"*o{c}" for c in cats if not graph[c].args["stack"]] + ["*strides", "n_elements"]
                         + (["*flat"] if flat else []))
        lines += ["    if n_elements > 0:",
                  f"        {kname}[(_cdiv(n_elements, {BLOCK}),)]({call}, BLOCK={BLOCK}, INDEX_64=index_64)",
                  f"    return {', '.join(out_names)}{',' if len(outs) == 1 else ''}"]
        pieces = {i for c in cats for i in graph[c].inputs}
        joined = (f" {len(cats)} cat(s) choose per lane which operand to read at which offset: a piece's "
                  "operands are read only on the lanes that take it." if cats else "")
        doc = (f"{region.describe(graph)}: {len(tensors)} operand(s) ({len(pieces & set(loads))} of them cat "
               f"pieces) and {len(outs)} write(s) per element, broadcast operands read through stride-0 dims."
               + joined)
        return Emitted([kernel], "\n".join(lines) + "\n", name, ["elementwise_fusion", "fp32_accumulation"], doc)


ELEMENTWISE = register(ElementwiseTemplate(), priority=90)
