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
pass 2**31. Operands read where other lanes read them again (a broadcast operand, a cat's
pieces) carry ``evict_last``, as torch.compile's pointwise kernels mark them. Fusion point:
any elementwise node or cat whose shape broadcasts to the domain joins; a reduction or scan
on the domain adopts a region without cats as its prologue (``rowwise``).

Variants: ``block1024`` above; ``hoisted`` gives each program a block of the plane of the
trailing dims and loops it over the leading dims that some operands are broadcast along,
loading those operands once a program (``hoisting``). It is the default where a program
reuses them 8 times or more and the plane fills a block (``default_variant``).
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.ir import Graph, Node, broadcast
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.lanes import Lanes, frame_shapes, leaves, shape_lines

BLOCK = 1024
HOIST_MIN_OUTER = 8        # hoisting is worth a round where each program reuses the operands this often
OUTER = 8                  # the hoisted variant's loop steps per program (fewer where programs would be few)
MIN_PROGRAMS = 2048        # the hoisted launcher takes fewer steps where the programs would number fewer


def hoisting(graph: Graph, region: Region) -> tuple[int, list[int]]:
    """(s, loads): the leading domain dims ``[0, s)`` a hoisted program loops over, and the tensor
    operands read over none of them (traced with fewer dims than the domain) that the region reads
    at the domain's own lanes. (0, []) where no operand is broadcast over a leading dim.

    Such an operand (rotary embedding's cos and sin, a bias over the last dims) takes the same
    values on every step of the loop, so it is loaded once per program instead of once per output
    element: the flat kernel reads rotary embedding's cos and sin, 2 x 4 bytes an output, from the
    caches, twice the bytes it streams from HBM, and ran at 72% of the copy ceiling where
    single-chain kernels ran at 91-100% (H200, 2026-12-07). Planned once a region (``state``):
    the variant choice, its availability and the emit all ask."""
    if "hoisting" not in region.state:
        region.state["hoisting"] = _plan_hoisting(graph, region)
    return region.state["hoisting"]


def _plan_hoisting(graph: Graph, region: Region) -> tuple[int, list[int]]:
    rank = len(region.domain)
    if rank < 2:
        return 0, []
    ranks = {n: len(graph[n].shape) for n in region.loads if not C.is_scalar(graph, n) and graph[n].shape}
    s = min(rank - 1, max((rank - r for r in ranks.values()), default=0))
    if s < 1:
        return 0, []
    dry = _lanes(graph, region, [], "offs")             # which operands the domain's own lanes read
    read = {n for (n, f) in dry.names if f == 0}
    return s, [n for n, r in ranks.items() if rank - r >= s and n in read]


def _lanes(graph: Graph, region: Region, hoisted: list[int], offs: str) -> Lanes:
    """The region's values and stores; the ``hoisted`` operands' loads are left to a prologue."""
    cats = [n for n in region.nodes if graph[n].op == "cat"]
    lanes = Lanes(graph, region.loads, cats, len(region.domain), flat=True, offs=offs)
    lanes.names.update({(n, 0): f"v{n}" for n in hoisted})
    for k, nid in enumerate(region.outputs):  # the launcher allocates the outputs contiguous: the lane index
        value = lanes.value(nid)
        lanes.lines.append(f"    tl.store(out{k}_ptr + offs, {C.store_value(value, graph[nid].kind, f'out{k}_ptr')}, "
                           "mask=mask)")
    return lanes


class ElementwiseTemplate:
    name = "elementwise"
    family = "elementwise"
    variants = ("block1024", "hoisted")

    def default_variant(self, graph: Graph, region: Region) -> str:
        """``hoisted`` where it is worth a round (``dominated``), else ``block1024``. Rotary
        embedding on an H100 (2026-12-07), both with the eviction hints: hoisted 0.894-0.898 ms,
        flat 0.936-0.978 ms, torch.compile 0.888-0.906 ms (without the hints the hoisted kernel
        ran 1.002 ms and the flat one 0.938)."""
        return "block1024" if self.dominated(graph, region, "hoisted") else "hoisted"

    def dominated(self, graph: Graph, region: Region, variant: str) -> bool:
        """``hoisted`` is not worth a round where no operand is broadcast over a leading dim, a
        program would reuse those operands fewer than ``HOIST_MIN_OUTER`` times, or the rest of
        the domain leaves a 1024-lane block part empty."""
        if variant != "hoisted":
            return False
        s, hoisted = hoisting(graph, region)
        outer, plane = _split(region.domain, s)
        return not hoisted or outer < HOIST_MIN_OUTER or plane < BLOCK

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
        if variant not in self.variants:
            return f"elementwise has no variant {variant!r}"
        if variant == "hoisted" and not hoisting(graph, region)[1]:
            return "elementwise hoisted: no operand is broadcast over a leading dim of the domain"
        return None

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
        s, hoisted = hoisting(graph, region) if variant == "hoisted" else (0, [])
        if hoisted:
            args += [("n_outer", f"the loop's extent: the product of domain dims 0-{s - 1}"),
                     ("OUTER", "loop steps per program")]
        args += [("BLOCK: tl.constexpr", "elements per program" + (" and step" if hoisted else "")),
                 ("INDEX_64: tl.constexpr", "an offset may pass 2**31: index in int64")]
        body = _hoisted_body(graph, region, s, hoisted) if hoisted else _flat_body(graph, region)
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
        if hoisted:
            lines += _hoisted_launch(kname, call, s)
        else:
            lines += ["    if n_elements > 0:",
                      f"        {kname}[(_cdiv(n_elements, {BLOCK}),)]({call}, BLOCK={BLOCK}, INDEX_64=index_64)"]
        lines.append(f"    return {', '.join(out_names)}{',' if len(outs) == 1 else ''}")
        pieces = {i for c in cats for i in graph[c].inputs}
        joined = (f" {len(cats)} cat(s) choose per lane which operand to read at which offset: a piece's "
                  "operands are read only on the lanes that take it." if cats else "")
        doc = (f"{region.describe(graph)}: {len(tensors)} operand(s) ({len(pieces & set(loads))} of them cat "
               f"pieces) and {len(outs)} write(s) per element, broadcast operands read through stride-0 dims."
               + joined)
        if hoisted:
            doc += (f" The {len(hoisted)} operand(s) broadcast over domain dims 0-{s - 1} are loaded once per "
                    "program, which then loops over those dims.")
        trans = ["elementwise_fusion", "fp32_accumulation"] + (["broadcast_hoisting"] if hoisted else [])
        return Emitted([kernel], "\n".join(lines) + "\n", name, trans, doc)


def _split(domain: tuple[int, ...], s: int) -> tuple[int, int]:
    """(outer, plane): the products of the domain's dims before ``s`` and from ``s`` on."""
    outer = plane = 1
    for d, n in enumerate(domain):
        outer, plane = (outer * n, plane) if d < s else (outer, plane * n)
    return outer, plane


def _index_lines(rank: int, first: int, of: str, indent: str, rest: str = "rest") -> list[str]:
    """Lines splitting the flat index ``of`` into ``i{first}``...``i{rank-1}`` (dims after
    ``first`` have constant sizes), through the temporary ``rest``."""
    lines = [f"{indent}{rest} = {of}"]
    for d in reversed(range(first + 1, rank)):
        lines += [f"{indent}i{d} = {rest} % n{d}", f"{indent}{rest} = {rest} // n{d}"]
    return lines + [f"{indent}i{first} = {rest}"]


def _flat_body(graph: Graph, region: Region) -> list[str]:
    """One program per BLOCK lanes of the flattened domain."""
    body = ["    if INDEX_64:",
            "        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
            "    else:   # int32 lanes: half the registers and instructions of int64 index math",
            "        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "    mask = offs < n_elements   # the last program covers the tail"]
    if region.domain:
        body += _index_lines(len(region.domain), 0, "offs", "    ")
    return body + _lanes(graph, region, [], "offs").lines


def _hoisted_body(graph: Graph, region: Region, s: int, hoisted: list[int]) -> list[str]:
    """Programs over (BLOCK lanes of the plane of dims s.., OUTER steps of dims 0..s-1): the
    hoisted operands are read at the plane's lanes before the loop, the rest at each step's."""
    rank = len(region.domain)
    plane = " * ".join(f"n{d}" for d in range(s, rank))
    body = ["    inner = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)   # lanes of the plane",
            f"    mask = inner < ({plane})"]
    body += _index_lines(rank, s, "inner", "    ")
    pro = Lanes(graph, region.loads, [], rank, flat=True, offs="inner")
    for nid in hoisted:
        pro.value(nid)
    body += pro.lines
    body += ["    o_lo = tl.program_id(1) * OUTER",
             "    for o in range(o_lo, tl.minimum(o_lo + OUTER, n_outer)):   # steps over dims before the plane",
             "        if INDEX_64:",
             f"            offs = o.to(tl.int64) * ({plane}) + inner",
             "        else:",
             f"            offs = o * ({plane}) + inner"]
    body += _index_lines(s, 0, "o", "        ", "at")   # a scalar: not the lanes' ``rest``
    return body + ["    " + line for line in _lanes(graph, region, hoisted, "offs").lines]


def _hoisted_launch(kname: str, call: str, s: int) -> list[str]:
    """Launcher lines: a plane block per program along grid dim 0, OUTER loop steps along dim 1
    (at least enough that the grid's second dim stays within 65535)."""
    return ["    n_outer = 1",
            f"    for n in domain[:{s}]:",
            "        n_outer *= n",
            "    plane = n_elements // n_outer if n_outer else 0",
            "    if plane >= 2**31:",
            "        raise ValueError(f\"a plane of {plane} lanes: the hoisted kernel indexes it in int32; \"",
            "                         \"lower the task at this size for the flat variant\")",
            f"    block = max(128, min({BLOCK}, triton.next_power_of_2(max(plane, 1))))",
            f"    steps = max(1, min({OUTER}, n_outer * _cdiv(plane, block) // {MIN_PROGRAMS}))   "
            "# fewer steps where programs would be few",
            "    steps = max(steps, _cdiv(n_outer, 65535))",
            "    if n_elements > 0:",
            f"        {kname}[(_cdiv(plane, block), _cdiv(n_outer, steps))]({call}, n_outer, steps, BLOCK=block, "
            "INDEX_64=index_64)"]


ELEMENTWISE = register(ElementwiseTemplate(), priority=90)
