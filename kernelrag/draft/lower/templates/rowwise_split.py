"""The row-wise template's two-stage variant: a long row split across programs.

When rows are few and long (MSE over a whole tensor: one row of N*M elements), one
program per row leaves the GPU idle. Stage 1 runs ``n_rows x n_split`` programs;
each reduces one CHUNK of its row (prologue included) to one fp32 partial per
reduction: ``numel * element_size`` bytes read, ``n_rows * n_split * 4`` written.
Stage 2 runs one program per row: it combines the partials (sum, max, min, prod),
applies the mean's divisor and the row epilogue, and stores the row outputs. The
partials are few (n_split <= 1024), so the second launch costs a few microseconds.
Only regions whose reductions all read the operands directly qualify (no reduction
of a reduction's result, no scan, no argmax, no full-size output).
"""
from __future__ import annotations

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_emit import _INIT, _doc, _transformations, _Writer, helpers
from kernelrag.draft.lower.templates.rowwise_passes import cone
from kernelrag.draft.lower.templates.rowwise_sizes import chunk_lines, row_counts

SPLIT_FNS = ("sum", "mean", "max", "min", "prod")
_COMBINE = {"sum": "tl.sum", "mean": "tl.sum"}      # max and min: the NaN-keeping combines


def _combined(fn: str, values: str) -> str:
    """One row's reduction of ``values`` (lanes or partials) for ``fn``."""
    if fn == "prod":
        return f"tl.reduce({values}, 0, _mul_combine)"
    if fn in ("max", "min"):
        return f"tl.reduce({values}, 0, _nan_{fn})"
    return f"{_COMBINE[fn]}({values}, axis=0)"


def split_unavailable(graph: Graph, region: Region) -> str | None:
    frames = region.state["frames"]
    inside = set(region.nodes)
    reduces = [n for n in region.nodes if graph[n].op == "reduce"]
    if not reduces:
        return "no reduction to split"
    for n in region.nodes:
        node = graph[n]
        if node.op == "scan":
            return "a scan cannot be split into independent chunks here"
        if node.op == "reduce":
            if node.args["fn"] not in SPLIT_FNS:
                return f"{node.args['fn']} partials are not combined by the split variant"
            if any(graph[c].op == "reduce" for c in _cone_all(graph, n, inside)):
                return "a reduction reads another reduction's result"
    if any(frames[o] == C.LANE for o in region.outputs):
        return "the region writes a full-size output"
    return None


def _cone_all(graph: Graph, nid: int, inside: set[int]) -> list[int]:
    out, stack = [], list(graph[nid].inputs)
    while stack:
        i = stack.pop()
        if i in inside and i not in out:
            out.append(i)
            stack.extend(graph[i].inputs)
    return out


def emit_split_region(template, graph: Graph, region: Region, name: str) -> Emitted:
    kernels, launcher = emit_split(_Writer(template, graph, region, "split"), name)
    return Emitted(kernels=kernels, launcher=launcher, launcher_name=name,
                   transformations=_transformations("split", graph, region), doc=_doc(graph, region, "split"))


def emit_split(w, name: str) -> tuple[list[str], str]:
    """(kernel texts, launcher text) of the two-stage variant; ``w`` is a rowwise ``_Writer``."""
    g, region = w.g, w.r
    reduces = [(j, n) for j, n in enumerate(region.nodes) if g[n].op == "reduce"]
    common_args = w.operand_args()
    parts = [(f"part{j}_ptr", f"fp32 partials of reduction {j}, (n_rows, n_split)") for j, _ in reduces]
    # stage 1
    names = w.names()
    body = w.row_head(outs=False) + ["    split = tl.program_id(1)", "    lanes = tl.arange(0, BLOCK_R)"]
    body += w.row_loads(names, "    ")
    row_nodes = [n for n in region.nodes if w.frames[n] != C.LANE and g[n].op != "reduce"]
    done = set(names)
    body += w.ready_rows(row_nodes, names, done, "    ")
    for j, nid in reduces:
        fn = g[nid].args["fn"]
        body += [f"    acc{j} = tl.full([BLOCK_R], {_INIT[fn]}, tl.float32)"]
    body += ["    for start in range(split * chunk, split * chunk + chunk, BLOCK_R):"]
    body += w.chunk("start", "        ")
    local = dict(names)
    need = sorted({c for _, n in reduces for c in cone(g, n, w.inside | set(w.loads))
                   if c not in done and (w.frame(c) == C.LANE or c in w.loads)})
    for nid in need:
        body += w.node_line(nid, local, "        ", True, {})
    for j, nid in reduces:
        fn, x = g[nid].args["fn"], local[g[nid].inputs[0]]
        masked = f"tl.where(rmask, {x}, {_INIT[fn]})"
        body.append({"sum": f"        acc{j} += {masked}", "mean": f"        acc{j} += {masked}",
                     "max": f"        acc{j} = _nan_max(acc{j}, {masked})",
                     "min": f"        acc{j} = _nan_min(acc{j}, {masked})",
                     "prod": f"        acc{j} *= {masked}"}[fn])
    for j, nid in reduces:
        fn = g[nid].args["fn"]
        final = _combined(fn, f"acc{j}")
        body.append(f"    tl.store(part{j}_ptr + row * n_split + split, {final})")
    args1 = common_args + parts + [("n_red", "elements per row"), ("n_split", "chunks per row"),
                                   ("chunk", "elements per chunk, a multiple of BLOCK_R"),
                                   ("BLOCK_R: tl.constexpr", "lanes per step")]
    k1 = f"{name}_partial_kernel"
    kernel1 = f"@triton.jit\ndef {k1}(\n{C.arg_lines(args1)}):\n" + "\n".join(body) + "\n"
    # stage 2
    names = w.names()
    outs = [(f"out{k}_ptr", f"output {k}, {w.frames[n]}-level") for k, n in enumerate(w.outs)]
    ostr = [(", ".join(f"out{k}_s{d}" for d in range(w.rank)), f"output {k}'s strides") for k in range(len(w.outs))]
    dens = [j for j, n in reduces if g[n].args.get("denom")]
    args2 = common_args + parts + outs + ostr + [("n_red", "elements per row (the mean's divisor)"),
                                                 ("n_split", "partials per row")]
    args2 += [(f"den{j}", "divisor of a batch-mean (the batch size)") for j in dens]
    args2 += [("BLOCK_S: tl.constexpr", "lanes over the partials, >= n_split")]
    body = w.row_head(outs=True)
    body += ["    s = tl.arange(0, BLOCK_S)", "    smask = s < n_split"]
    body += w.row_loads(names, "    ")
    done = set(names)
    for j, nid in reduces:
        fn = g[nid].args["fn"]
        p = f"tl.load(part{j}_ptr + row * n_split + s, mask=smask, other={_INIT[fn]})"
        comb = _combined(fn, p)
        body.append(f"    v{nid} = {comb}{w.scale(g[nid])}")
        names[nid] = f"v{nid}"
        done.add(nid)
    body += w.ready_rows(row_nodes, names, done, "    ")
    body += w.stores(names, "    ", {C.ROW, C.SQUEEZED})
    k2 = f"{name}_kernel"
    kernel2 = f"@triton.jit\ndef {k2}(\n{C.arg_lines(args2)}):\n" + "\n".join(body) + "\n"
    kernels = helpers(w) + [kernel1, kernel2]
    return kernels, _launcher(w, region, name, k1, k2, reduces, dens)


def _launcher(w, region: Region, name: str, k1: str, k2: str, reduces, dens) -> str:
    g = w.g
    params = [f"a{k}" for k in range(len(w.loads))]
    tensors = C.tensor_params(g, w.loads, params)
    ref = C.float_ref(g, w.loads, params)
    lines = C.launcher_head(name, params, f"{region.describe(g)}; two stages: chunk partials, then one "
                                          "program per row combines them.")
    lines += C.domain_lines(tensors, w.rank)
    lines += chunk_lines(w.kept, w.red, 1024)
    allocs, outs, strides = w.output_allocs(ref, f"{tensors[0]}.device")   # row and squeezed outputs only
    lines += allocs
    part_names = [f"part{j}" for j, _ in reduces]
    for p in part_names:
        lines.append(f"    {p} = torch.empty((n_rows, n_split), dtype=torch.float32, device={tensors[0]}.device)")
    for j in dens:
        dims = g[region.nodes[j]].args["denom"]
        lines.append(f"    den{j} = float(" + " * ".join(f"domain[{d}]" for d in dims) + ")")
    common = C.call_values(g, w.loads, params) + ["*domain"] + [f"*_strides({p}, domain)" for p in tensors]
    call1 = ", ".join(common + part_names + ["n_red", "n_split", "chunk"])
    call2 = ", ".join(common + part_names + outs + strides + ["n_red", "n_split"] + [f"den{j}" for j in dens])
    lines += ["    if n_rows > 0 and n_red > 0:",
              f"        {k1}[(n_rows, n_split)]({call1}, BLOCK_R=block_r, num_warps=4)",
              f"        {k2}[(n_rows,)]({call2}, BLOCK_S=_pow2(n_split), num_warps=4)",
              f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
    return "\n".join(lines) + "\n"


# few long rows: one program per row would leave most of the H200's 132 SMs idle
FEW_ROWS, LONG_ROW = 128, 65536


def few_long_rows(n_rows: int, n_red: int) -> bool:
    return n_rows < FEW_ROWS and n_red > LONG_ROW


def few_long_rows_code() -> str:
    """The same rule as a launcher's condition on its run-time sizes."""
    return f"n_rows < {FEW_ROWS} and n_red > {LONG_ROW}"


def is_split_worthwhile(graph: Graph, region: Region) -> bool:
    """Few long rows at the traced size."""
    return few_long_rows(*row_counts(region))
