"""GEMM / BMM template: a traced ``matmul`` node and the epilogue its output tile can hold.

The kernels (tiling, grouped order, split-K, the matrix-vector form, 3xTF32 with
K-major operands on CUDA) are in ``lower/gemm_kernels.py`` and ``lower/gemm.py``,
whose docstrings teach them. This module decides what joins a GEMM region:

* the anchor, a ``matmul`` node; a transposed operand reaches it as a strided view
  (free), a ``tril`` / ``triu`` operand as structure (``a_tri`` / ``b_tri``) that
  skips the zero half of the K loop;
* elementwise nodes on the output frame, with any other operands broadcast to it
  (bias, residual, per-row or per-column scales, and numbers read at run time such as
  ``self.scale``, which the kernel takes by value): one pass over registers instead of
  one HBM round trip of the output each;
* reductions across N (sum, mean, max, min, and what softmax, log-softmax and
  logsumexp decompose into) while one tile spanning the traced N stays efficient
  (``fuses_row``: up to 128 columns, or 1024 when K is short): the row never leaves
  registers. Past that, a chain that ends in one value per row (logsumexp, an lm
  head's cross-entropy: reductions of the tile's values, a logsumexp's shifted sum, and
  row values from them and per-row operands such as class indices) leaves per-tile row
  partials and a second kernel combines them (``lower/gemm_rows.py``: the product is never
  written). Any other wider row closes the region and the reduction template reads the
  product back (a second pass);
* a final ``tril`` / ``triu`` of the output, which also skips every tile wholly
  outside the triangle.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise, literal, node_expr
from kernelrag.draft.lower import gemm_rows
from kernelrag.draft.lower.gemm import gemm_parts, precision_note, transformations_of
from kernelrag.draft.lower.gemm_kernels import tma_eligible
from kernelrag.draft.lower.gemm_spec import GemmSpec, Tri
from kernelrag.draft.lower.ir import Graph, Node, fits
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates.rowwise import ROWWISE

MAX_ROW = 1024          # widest row a fused reduction holds in one tile (the launcher's limit)
WIDE_ROW = 128          # past this N, the tile that spans a row is thin (BLOCK_M = 8192 // N) ...
SHORT_K = 512           # ... and pays only where K is short, the GEMM bound by the stores it saves


def fuses_row(n: int, k: int) -> bool:
    """Whether a reduction across N joins the GEMM's tile. One tile must span the row, so
    past ``WIDE_ROW`` columns its BLOCK_M shrinks (16 rows at N = 1024, each program
    reading all of B): linear_l2_normalize's fp32 GEMM ran at 20 TFLOP/s so, against the
    78 of the same GEMM whose wider row went to a second pass (H200, 2026-12-02). The
    second pass costs one more write and read of the output, about 100 / K of a tf32x3
    GEMM's time: small for a long K, a multiple of it for a short one."""
    return n <= WIDE_ROW or (n <= MAX_ROW and k <= SHORT_K)
_ROW_REDUCE = {"sum", "mean", "max", "min"}


def epilogue_text(graph: Graph, region: Region, anchor: int, extras: list[int], row_reduce: bool = False,
                  scalars: tuple[int, ...] = ()) -> str:
    """Lines computing ``acc`` for the region's nodes after ``anchor``: each node a
    ``v<id>`` from the elementwise emitter, extras as ``e<k>``, numbers read at run time
    as ``s<k>``, constants as literals."""
    names = {anchor: "acc"}
    names.update({nid: f"e{k}" for k, nid in enumerate(extras)})
    names.update({nid: f"s{k}" for k, nid in enumerate(scalars)})
    lines = []
    for nid in region.nodes[region.nodes.index(anchor) + 1:]:
        node = graph[nid]
        for i in node.inputs:
            if graph[i].op == "const":
                names.setdefault(i, literal(graph[i].args["value"]))
        if node.op in ("squeeze_row", "tri"):
            names[nid] = names[node.inputs[0]]          # a squeeze is the store's shape; tri is out_tri
            continue
        if node.op == "reduce":
            x, fn = names[node.inputs[0]], node.args["fn"]
            if not row_reduce or fn not in _ROW_REDUCE:
                raise ValueError(f"reduction {fn} is not fused here")
            expr = gemm_rows.reduce_expr(fn, x) + (" / N" if fn == "mean" else "")
        else:
            expr = node_expr(graph, node, names)
        lines.append(f"v{nid} = {expr}")
        names[nid] = f"v{nid}"
    last = region.nodes[-1]
    if last != anchor:
        lines.append(f"acc = {names[last]}")
    return "".join(line + "\n" for line in lines)


def wrapper(name: str, core: str, loads: list[int], operands: list[int], extras: list[int], doc: str,
            scalars: tuple[int, ...] = ()) -> str:
    """The region's launcher: its loads in order, handed to the template's launcher."""
    params = [f"x{k}" for k in range(len(loads))]
    pick = [params[loads.index(i)] for i in operands + extras + list(scalars)]
    return (f"def {name}({', '.join(params)}):\n    \"\"\"{doc}\"\"\"\n"
            f"    return ({core}({', '.join(pick)}),)\n")


# A product this short in K is bound by writing its output: 2K FLOPs per 4-byte output
# element against the H200's fp32 FMA rate over its bandwidth (67 TFLOP/s / 4.2 TB/s, about
# 16 FLOPs a byte) puts the FMAs under the store time up to K = 32. Exact fp32 FMAs then
# cost nothing and skip 3xTF32's operand splits and transposes; its MMA tiles stored at
# 1.8 TB/s for a 32768x16 by 16x32768 product (matmul_tall_skinny: 0.84x torch.compile,
# 2026-12-04). 3xTF32 and bf16x6 are dominated there (``dominated``).
STORE_BOUND_K = 32


def fp32_task(graph: Graph) -> bool:
    """True unless every output of the task is a 16-bit float (whose GEMMs use the tensor cores directly)."""
    return not graph.out_dtypes or any(d in ("torch.float32", "torch.float64") for d in graph.out_dtypes)


class GemmTemplate:
    """Variants name the dot path: for fp32 tasks ``tf32x3`` (default: 3xTF32 with K-major
    operands on CUDA, ieee under the interpreter), ``bf16x6`` (three bf16 parts per operand and
    a compensated sum over K: more accurate than 3xTF32 at about its tensor-core time) or
    ``ieee`` (fp32 FMAs everywhere, several times slower, but the default where K is at most
    ``STORE_BOUND_K``: the store bounds such a product), so the graph's evidence for each
    transformation orders them; without evidence a check that 3xTF32 fails is tried next on
    bf16x6 before the slow path. 16-bit tasks take ``tensor_cores`` (bf16/fp16 operands
    straight to the MMA, fp32 accumulation). Where the region reduces rows across tiles
    (``gemm_rows``), ``rows_after`` is the race's other entrant: the product written at the
    default precision, then the row-wise template's kernel over it (``_rows_after``)."""
    name = "gemm"
    family = "gemm"
    single_output = True     # the launcher writes the region's last value only (see ``partition``)
    variants = ("tf32x3", "bf16x6", "ieee", "tensor_cores", "rows_after")
    fp32_variants = ("tf32x3", "bf16x6", "ieee")

    def default_variant(self, graph: Graph, region: Region) -> str:
        if not fp32_task(graph):
            return "tensor_cores"
        return "ieee" if region.state.get("k", STORE_BOUND_K + 1) <= STORE_BOUND_K else "tf32x3"

    def dominated(self, graph: Graph, region: Region, variant: str) -> str | None:
        """Why ``variant`` is not worth a round here, or None. Where the store bounds the product
        (K <= ``STORE_BOUND_K``) the exact FMAs are the fastest path as well as the most accurate:
        on the H100 (2026-12-06) a 32768x16 by 16x32768 product ran 1.27x torch.compile on 64x128
        tiles of exact FMAs (``bench/coop_rows.py``) and 1.05x lowered onto 3xTF32 in that day's
        suite run, where the graph's evidence from square products (3xTF32 wins there) ranked
        3xTF32 first and the short-K kernel never got a round. The ``matmul_tf32x3`` skill still
        gets one."""
        if variant in ("tf32x3", "bf16x6") and region.state.get("k", STORE_BOUND_K + 1) <= STORE_BOUND_K:
            return f"K = {region.state['k']} <= {STORE_BOUND_K}: the store bounds the product, exact FMAs cost no time"
        return None

    def opens(self, graph: Graph, node: Node) -> bool:
        return node.op == "matmul"

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        st = region.state
        if not region.nodes:
            if node.op != "matmul":
                return False
            region.domain = node.shape
            a_shape = graph[node.inputs[0]].shape
            st.update(anchor=node.id, reduced=False, closed=False, k=a_shape[-1] if a_shape else 1,
                      vector_b=len(graph[node.inputs[1]].shape) == 1)
            wide = len(node.shape) >= 2 and not fuses_row(node.shape[-1], st["k"])
            st["split"] = gemm_rows.plan(graph, node.id) if wide and not st["vector_b"] else None
            return True
        if st["split"] is not None:          # rows reduced across tiles: the plan made at the anchor
            ok = not st["closed"] and node.id in st["split"]
            st["closed"] = st["closed"] or node.id == st["split"][-1]
            return ok
        if st["closed"] or not region.domain:
            return False
        inside = set(region.nodes)
        domain = region.domain
        row = domain[:-1] + (1,)
        if node.op == "tri":
            if st["reduced"] or node.inputs[0] != region.nodes[-1] or len(domain) < 2:
                return False
            st["closed"] = True
            return True
        if node.op == "squeeze_row":
            ok = (st["reduced"] and node.inputs[0] == region.nodes[-1] and tuple(node.args["dims"]) == (len(domain) - 1,)
                  and graph[node.inputs[0]].shape == row)
            st["closed"] = ok
            return ok
        if node.op == "reduce":
            ok = (node.inputs[0] in inside and node.args["fn"] in _ROW_REDUCE and len(domain) >= 2
                  and tuple(node.args["dims"]) == (len(domain) - 1,) and fuses_row(domain[-1], st["k"])
                  and not st["vector_b"] and node.shape == row)
            if ok:
                st["reduced"] = True
            return ok
        if not is_elementwise(node) or node.shape not in (domain, row if st["reduced"] else domain):
            return False
        if not any(i in inside for i in node.inputs):
            return False
        return all(i in inside or graph[i].op in ("const", "scalar")
                   or (graph[i].kind == "float" and fits(graph[i].shape, domain)) for i in node.inputs)

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        return False

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        if variant not in self.variants:
            return f"gemm has no variant {variant!r} ({', '.join(self.variants)})"
        if variant == "rows_after" and region.state.get("split") is None:
            return "no rows reduced across tiles: nothing to move after the product"
        if variant != "tensor_cores" and variant != "rows_after" and not fp32_task(graph):
            return f"the task computes in 16-bit floats: its GEMMs take the tensor cores directly ({variant} is " \
                   "an fp32 path)"
        if variant == "tensor_cores" and fp32_task(graph):
            return "the task computes in fp32: its GEMMs take tf32x3, bf16x6 or ieee"
        if region.outputs != [region.nodes[-1]]:
            return "the GEMM region's intermediate values are needed outside it; only its last value is written"
        if region.state.get("split") is not None and region.nodes[1:] != region.state["split"]:
            return "the region stops short of the rows its partials were planned for"
        return None

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        if variant == "rows_after":
            return self._rows_after(graph, region, name)
        anchor = graph[region.state["anchor"]]
        a, b = anchor.inputs
        later = region.nodes[region.nodes.index(anchor.id) + 1:]
        read = [i for i in region.loads if any(i in graph[n].inputs for n in later)]
        extras = [i for i in read if graph[i].op != "scalar"]
        scalars = tuple(i for i in read if graph[i].op == "scalar")
        domain = region.domain
        rank_row = lambda i: len(domain) >= 2 and domain[-1] > 1 and \
            (1,) * (len(domain) - len(graph[i].shape)) + graph[i].shape == domain[:-1] + (1,)
        last = graph[region.nodes[-1]]
        tri = next((graph[n] for n in later if graph[n].op == "tri"), None)
        reduced = region.state["reduced"]
        row_out = reduced and (last.shape == domain[:-1] + (1,) or last.op == "squeeze_row")
        split = region.state.get("split")
        extra_rows = tuple(rank_row(i) for i in extras)
        extra_ints = tuple(graph[i].kind != "float" for i in extras)
        epilogue = epilogue_text(graph, region, anchor.id, extras, row_reduce=True, scalars=scalars) if not split \
            else gemm_rows.tile_lines(graph, later, anchor.id, extras, scalars)
        combine = gemm_rows.combine_kernel(graph, later, anchor.id, extras, extra_rows, extra_ints, scalars,
                                           f"{name}_gemm") if split else ""
        spec = GemmSpec(
            name=f"{name}_gemm",
            a_tri=Tri(*anchor.args["a_tri"]) if anchor.args.get("a_tri") else None,
            b_tri=Tri(*anchor.args["b_tri"]) if anchor.args.get("b_tri") else None,
            epilogue=epilogue, extra_rows=extra_rows, extra_ints=extra_ints, whole_rows=reduced,
            row_out=row_out or bool(split), row_partials=len(gemm_rows.reductions(graph, later)) if split else 0,
            combine=combine,
            squeeze_rows=last.op == "squeeze_row" or bool(split) and last.shape == domain[:-1],
            out_tri=Tri(tri.args["form"], tri.args["diagonal"]) if tri else None,
            vector=region.state["vector_b"] or (len(graph[b].shape) >= 2 and graph[b].shape[-1] == 1),
            n_scalar=len(scalars),
            doc=f"{region.describe(graph)} as one tiled GEMM with its epilogue fused",
            precision=variant if variant in self.fp32_variants else "tf32x3")
        kernels, launcher = gemm_parts(spec)
        ops = " > ".join(dict.fromkeys(graph[n].origin or graph[n].op for n in region.nodes))
        doc = (f"{ops}: a tiled GEMM (one BLOCK_M x BLOCK_N output tile per program, grouped order, fp32 "
               "accumulation, split-K when K is long next to the output) with the rest of the chain applied to "
               "the accumulator before the one store: 2*M*N*K FLOPs, (M*K + K*N + M*N) elements moved. "
               + precision_note(spec) + "; tiles from the shape (tiles.GEMM_TILES).")
        trans = transformations_of(spec)
        if split and gemm_rows.rescaled(graph, later, anchor.id):
            trans.append("online_softmax")       # a logsumexp's tiles merged by their maxima
        if not fp32_task(graph):      # 16-bit operands: no 3xTF32 split, the tensor cores take them as they are
            fp32_only = ("tf32x3", "k_major_operands", "tf32_split_pass", "bf16x6", "compensated_summation",
                         "ieee_fp32_dot")
            trans = [t for t in trans if t not in fp32_only] + ["tensor_cores"]
            if tma_eligible(spec):    # on CUDA the persistent TMA kernel runs it (gemm_kernels.py)
                trans += ["tma_loads", "persistent_kernel"]
        return Emitted(kernels=kernels, launcher=launcher + "\n\n" + wrapper(
            name, spec.name, region.loads, [a, b], extras, f"{ops} (GEMM template)", scalars),
            launcher_name=name, transformations=trans, doc=doc)

    def _rows_after(self, graph: Graph, region: Region, name: str) -> Emitted:
        """The split-row region as two launches: the product at the task's default precision
        (written once), then the row-wise template's default kernel over its rows. The split
        epilogue saves the product's round trip (512 MB of bf16 logits at the suite's lm head,
        about 0.2 ms on an H200) but adds an exp a product element to every tile; which is faster
        is the GPU's answer, so the two race."""
        anchor, chain = region.state["anchor"], region.nodes[1:]
        rows = ROWWISE.replayed(graph, graph[next(n for n in chain if graph[n].op == "reduce")], chain)
        if rows is None:
            raise ValueError(f"the row-wise template does not take {region.describe(graph)}'s chain after the product")
        rows.loads, rows.outputs = rows.outside_inputs(graph), [chain[-1]]
        product = Region(template=self, nodes=[anchor], domain=region.domain,
                         state={**region.state, "split": None}, outputs=[anchor],
                         loads=[i for i in region.loads if i in graph[anchor].inputs])
        mm = self.emit(graph, product, self.default_variant(graph, product), f"{name}_mm")
        red = ROWWISE.emit(graph, rows, ROWWISE.default_variant(graph, rows), f"{name}_rows")
        param = {i: f"x{k}" for k, i in enumerate(region.loads)} | {anchor: "y"}
        ops = " > ".join(dict.fromkeys(graph[n].origin or graph[n].op for n in region.nodes))
        wrap = (f"def {name}({', '.join(f'x{k}' for k in range(len(region.loads)))}):\n"
                f'    """{ops}: the product, then its rows (GEMM template, rows_after)"""\n'
                f"    y, = {name}_mm({', '.join(param[i] for i in product.loads)})\n"
                f"    return {name}_rows({', '.join(param[i] for i in rows.loads)})\n")
        trans = list(dict.fromkeys(mm.transformations + red.transformations + ["unfused_row_reduction"]))
        return Emitted(kernels=mm.kernels + [k for k in red.kernels if k not in mm.kernels],
                       launcher=mm.launcher + "\n\n" + red.launcher + "\n\n" + wrap, launcher_name=name,
                       transformations=trans, doc=f"{mm.doc} Then: {red.doc}")


register(GemmTemplate(), 20)
