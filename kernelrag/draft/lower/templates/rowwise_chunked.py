"""The row-wise template's chunked variant: few long rows that end in a full-size output.

A group norm over (64, 8 groups, 8 x 65536) has 512 rows of 2 MB. One program per row
leaves the looped kernel at 512 programs on 132 SMs, 1.3 waves of a memory-bound job: on
the H200 (2026-12-02) it ran at 67% of the memory speed of light, where torch.compile's
two kernels (statistics, then the normalisation) ran at 87-89%. Here every row is cut
into ``n_split`` chunks and three kernels run:

  stats    grid (rows, n_split): each program reduces its chunk (the prologue recomputed
           per lane) to fp32 partials, one per reduction: a sum, an extreme, a softmax's
           (max, sum of exp about it) or a variance's sum of squared deviations about the
           chunk's own mean (each lane accumulates about its first value, the looped
           pass's shifted form, then the lanes are combined about the chunk mean);
  combine  one program per row: the partials become the row's reductions (Chan's rule
           for the variance: M2 = sum M2_c + n_c (mean_c - mean)^2, so no cancellation;
           a softmax sum rescaled by exp(max_c - max)), then the row epilogue; it stores
           the row outputs and the row values the last pass reads (a few bytes a row);
  apply    grid (rows, n_split): each program writes its chunk of the full-size outputs.

Bytes: the operands are read twice (stats, apply) and the output written once, the
traffic of the looped kernel and of torch.compile's pair, but over ``rows * n_split``
programs, enough to fill the GPU. Only a region whose reductions form one pass (plain
sums and extremes, with their softmax and variance riders) and that writes a full-size
output qualifies; reductions-only regions take ``split``.
"""
from __future__ import annotations

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_emit import _INIT, _transformations, _Writer, helpers
from kernelrag.draft.lower.templates.rowwise_passes import ONLINE_SOFTMAX, cone, plan_passes
from kernelrag.draft.lower.templates.rowwise_sizes import chunk_lines, row_counts

CHUNK_FNS = ("sum", "mean", "max", "min")
FEW_ROWS, LONG_ROW = 1024, 65536          # at most ~2 waves of 16-warp looped programs on 132 SMs
TARGET_PROGRAMS = 2048                    # rows x chunks: ~16 resident 4-warp programs per SM
WARPS = 4                                 # 1024 lanes a step: two 16-byte loads per operand a thread


def chunked_unavailable(graph: Graph, region: Region) -> str | None:
    frames = region.state["frames"]
    if region.state.get("scans"):
        return "a scan carries across the whole row: chunks cannot run independently"
    if not any(frames[o] == C.LANE for o in region.outputs):
        return "no full-size output (the split variant reduces such rows)"
    reduces = [n for n in region.nodes if graph[n].op == "reduce"]
    if not reduces:
        return "no reduction to chunk"
    if any(graph[n].args["fn"] not in CHUNK_FNS or graph[n].args.get("denom") for n in reduces):
        return f"only {', '.join(CHUNK_FNS)} partials are combined by the chunked variant"
    passes, riders = plan_passes(graph, region)
    if len(passes) != 1:
        return "reductions of reductions need a pass each: more than one statistics pass"
    for n, rider in riders.items():
        if graph[rider.base].args["fn"] != ("max" if rider.kind == ONLINE_SOFTMAX else "mean"):
            return f"a {rider.kind} rider rides an unexpected reduction"
    return None


def is_chunked_worthwhile(region: Region) -> bool:
    """Few rows, each long: one program per row would run in about two waves or fewer."""
    rows, n_red = row_counts(region)
    return rows <= FEW_ROWS and n_red >= LONG_ROW


class _Chunked:
    """The three kernels' text for one region (``w``: the row-wise writer)."""

    def __init__(self, w: _Writer, name: str):
        self.w, self.g, self.name = w, w.g, name
        self.passes, self.riders = plan_passes(w.g, w.r)
        self.reduces = self.passes[0]
        self.bases = [n for n in self.reduces if n not in self.riders]
        # row values the apply pass reads: every row-level node computed from the reductions
        self.row_vals = [n for n in w.r.nodes if w.frames[n] == C.ROW and self.g[n].op != "squeeze_row"]

    def output_args(self) -> list[tuple[str, str]]:
        w = self.w
        return ([(f"out{k}_ptr", f"output {k}, {w.frames[n]}-level") for k, n in enumerate(w.outs)]
                + [(", ".join(f"out{k}_s{d}" for d in range(w.rank)), f"output {k}'s strides") for k in range(len(w.outs))])

    # ------------------------------------------------------------------ stats
    def stats_kernel(self) -> str:
        w = self.w
        names = w.names()
        body = w.row_head(outs=False) + ["    split = tl.program_id(1)", "    lo = split * chunk",
                                        "    lanes = tl.arange(0, BLOCK_R)"]
        body += w.row_loads(names, "    ")
        body += self.stats_lines(names)
        args = w.operand_args(constant_reduced=len(w.red) > 1) + self.part_args()
        args += [("n_red", "elements per row"), ("n_split", "chunks per row"),
                 ("chunk", "elements per chunk, a multiple of BLOCK_R"), ("BLOCK_R: tl.constexpr", "lanes per step")]
        return f"@triton.jit\ndef {self.name}_stats_kernel(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def part_args(self) -> list[tuple[str, str]]:
        return [(f"part{self.w.r.nodes.index(n)}_ptr", "fp32 partials of a reduction, (n_rows, n_split)")
                for n in self.reduces]

    def stats_lines(self, names: dict[int, str]) -> list[str]:
        """The chunk's partial statistics, stored: everything after the row operands' loads."""
        body = self.stats_ready(names) + self.stats_init("    ")
        body.append("    for start in range(0, chunk, BLOCK_R):   # start: the offset inside this chunk")
        inner = "        "
        body += [line for line in self.w.chunk("lo + start", inner) if not line.lstrip().startswith("out")]
        local = dict(names)
        body += self.stats_lanes(local, inner) + self.stats_update(local, inner)
        return body + self.stats_finish("    ")

    def stats_ready(self, names: dict[int, str]) -> list[str]:
        """Row-level values that need no reduction (named in ``names``)."""
        w, g = self.w, self.g
        row_ready = [n for n in w.r.nodes if w.frames[n] != C.LANE and g[n].op != "reduce"]
        return w.ready_rows(row_ready, names, set(names), "    ")

    def stats_init(self, ind: str) -> list[str]:
        return [line for nid in self.reduces for line in self.w.acc_init(nid, self.riders.get(nid), ind)]

    def stats_lanes(self, local: dict[int, str], ind: str) -> list[str]:
        """The lane values the reductions read (loads and prologue), named in ``local``."""
        w, g = self.w, self.g
        sources = [self.riders[n].source if n in self.riders else g[n].inputs[0] for n in self.reduces]
        need = sorted({c for s in sources for c in cone(g, s, w.inside | set(w.loads)) + [s]
                       if c not in local and (w.frame(c) == C.LANE or c in w.loads)})
        return [line for nid in need for line in w.node_line(nid, local, ind, True, {})]

    def stats_update(self, local: dict[int, str], ind: str) -> list[str]:
        g, body = self.g, []
        for nid in self.bases:
            on_top = [r for r in self.reduces if r in self.riders and self.riders[r].base == nid]
            body += self.w.acc_update(nid, local[g[nid].inputs[0]], on_top, self.riders, ind)
        return body

    def stats_finish(self, ind: str) -> list[str]:
        """The chunk's partials from the accumulators, stored."""
        w, g = self.w, self.g
        body = [f"{ind}n_c = tl.minimum(chunk, n_red - lo).to(tl.float32)   # elements of this chunk"]
        for nid in self.bases:
            j = w.r.nodes.index(nid)
            fn = g[nid].args["fn"]
            part = f"tl.reduce(acc{j}, 0, _nan_{fn})" if fn in ("max", "min") else f"tl.sum(acc{j}, axis=0)"
            body.append(f"{ind}p{j} = {part}")
        for nid, rider in self.riders.items():
            j, b = w.r.nodes.index(nid), w.r.nodes.index(rider.base)
            if rider.kind == ONLINE_SOFTMAX:    # the chunk's sum of exp(y - chunk max)
                body += [f"{ind}m_ref = tl.where(p{b} == float('-inf'), 0.0, p{b})",
                         f"{ind}p{j} = tl.sum(acc{j} * tl.exp(acc{b} - m_ref), axis=0)"]
            else:                               # squared deviations about the chunk's own mean
                body += [f"{ind}dmk = p{b} / n_c - acc{j}_k",
                         f"{ind}p{j} = tl.maximum(tl.sum(acc{j}_sq - 2.0 * dmk * acc{j} + acc{j}_n * dmk * dmk, axis=0), 0.0)"]
        for nid in self.reduces:
            j = w.r.nodes.index(nid)
            body.append(f"{ind}tl.store(part{j}_ptr + row * n_split + split, p{j})")
        return body

    # ------------------------------------------------------------------ combine
    def combine_kernel(self) -> str:
        w = self.w
        names = w.names()
        body = w.row_head(outs=True) + w.row_loads(names, "    ") + self.combine_lines(names)
        for k, nid in enumerate(self.row_vals):
            body.append(f"    tl.store(rows_ptr + row * N_ROW_VALS + {k}, {names[nid]})")
        args = w.operand_args(constant_reduced=len(w.red) > 1) + self.part_args()
        args += self.output_args() + [("rows_ptr", "fp32 row values the apply pass reads, (n_rows, N_ROW_VALS)"),
                               ("n_red", "elements per row"), ("n_split", "chunks per row"), ("chunk", "elements per chunk"),
                               ("N_ROW_VALS: tl.constexpr", "row values stored per row"),
                               ("BLOCK_S: tl.constexpr", "lanes over the chunks, >= n_split")]
        return f"@triton.jit\ndef {self.name}_combine_kernel(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def combine_lines(self, names: dict[int, str], from_l2: bool = False, first_only: str = "") -> list[str]:
        """The row's partials combined into its reductions, the row values computed from them and
        the row-level outputs stored (under ``first_only``, a condition, when every chunk combines).
        ``from_l2``: the partials were stored by other programs of this launch, so they are loaded
        past L1 (not coherent across SMs: a neighbouring row's earlier load may hold the line)."""
        cg = ', cache_modifier=".cg"' if from_l2 else ""
        w, g = self.w, self.g
        body = ["    s = tl.arange(0, BLOCK_S)", "    smask = s < n_split",
                "    n_c = tl.minimum(chunk, n_red - s * chunk).to(tl.float32)"]
        done = set(names)
        part = {n: f"part{w.r.nodes.index(n)}_ptr + row * n_split + s" for n in self.reduces}
        for nid in self.bases:
            fn, j = g[nid].args["fn"], w.r.nodes.index(nid)
            body.append(f"    q{j} = tl.load({part[nid]}, mask=smask, other={_INIT[fn]}{cg})")
            comb = f"tl.reduce(q{j}, 0, _nan_{fn})" if fn in ("max", "min") else f"tl.sum(q{j}, axis=0)"
            body.append(f"    v{nid} = {comb}{w.scale(g[nid])}")
        for nid, rider in self.riders.items():
            j, b = w.r.nodes.index(nid), w.r.nodes.index(rider.base)
            body.append(f"    q{j} = tl.load({part[nid]}, mask=smask, other=0.0{cg})")
            if rider.kind == ONLINE_SOFTMAX:    # each chunk's sum rescaled to the row max
                body += [f"    m_ref = tl.where(v{rider.base} == float('-inf'), 0.0, v{rider.base})",
                         f"    q_ref = tl.where(q{b} == float('-inf'), m_ref, q{b})",
                         f"    v{nid} = tl.sum(tl.where(smask, q{j} * tl.exp(q_ref - m_ref), 0.0), axis=0){w.scale(g[nid])}"]
            else:                               # Chan: M2 = sum M2_c + n_c (mean_c - mean)^2
                body += [f"    dev = tl.where(smask, q{b} / n_c - tl.sum(q{b}, axis=0) / n_red, 0.0)",
                         f"    v{nid} = tl.sum(tl.where(smask, q{j} + n_c * dev * dev, 0.0), axis=0){w.scale(g[nid])}"]
        for nid in self.reduces:
            names[nid] = f"v{nid}"
            done.add(nid)
        row_nodes = [n for n in w.r.nodes if w.frames[n] != C.LANE and g[n].op != "reduce"]
        body += w.ready_rows(row_nodes, names, done, "    ")
        stores = w.stores(names, "        " if first_only else "    ", {C.ROW, C.SQUEEZED})
        return body + ([f"    if {first_only}:"] if first_only and stores else []) + stores

    # ------------------------------------------------------------------ apply
    def apply_kernel(self) -> str:
        w = self.w
        names = w.names()
        body = w.row_head(outs=True) + ["    split = tl.program_id(1)", "    lo = split * chunk",
                                       "    lanes = tl.arange(0, BLOCK_R)"]
        body += w.row_loads(names, "    ")
        for k, nid in enumerate(self.row_vals):
            body.append(f"    v{nid} = tl.load(rows_ptr + row * N_ROW_VALS + {k})")
            names[nid] = f"v{nid}"
        body += self.apply_lines(names)
        args = w.operand_args(constant_reduced=len(w.red) > 1) + self.output_args() + [
            ("rows_ptr", "fp32 row values from the combine, (n_rows, N_ROW_VALS)"), ("n_red", "elements per row"),
            ("chunk", "elements per chunk, a multiple of BLOCK_R"), ("N_ROW_VALS: tl.constexpr", "row values per row"),
            ("BLOCK_R: tl.constexpr", "lanes per step")]
        return f"@triton.jit\ndef {self.name}_apply_kernel(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def apply_lines(self, names: dict[int, str]) -> list[str]:
        """The chunk's full-size outputs, step by step, from the row values in ``names``."""
        inner = "        "
        return (["    for start in range(0, chunk, BLOCK_R):"] + self.w.chunk("lo + start", inner)
                + self.apply_outputs(names, inner))

    def apply_outputs(self, names: dict[int, str], ind: str) -> list[str]:
        """One step's full-size outputs: the lane values not yet in ``names`` computed, then stored."""
        w, g = self.w, self.g
        for nid in w.r.nodes:                   # a squeezed row value is its row value
            if g[nid].op == "squeeze_row" and g[nid].inputs[0] in names:
                names[nid] = names[g[nid].inputs[0]]
        need: set[int] = set()
        for t in [n for n in w.outs if w.frames[n] == C.LANE]:
            need.update(c for c in cone(g, t, w.inside | set(w.loads)) + [t]
                        if c not in names and (w.frame(c) == C.LANE or c in w.loads))
        local, body = dict(names), []
        for nid in sorted(need):
            body += w.node_line(nid, local, ind, True, {})
        return body + w.stores(local, ind, {C.LANE})

    # ------------------------------------------------------------------ launcher
    def launcher_start(self, region: Region, summary: str) -> tuple[list[str], list[str], str, list[str]]:
        """(params, tensor params, float reference, the launcher's first lines: head and domain)."""
        w, g = self.w, self.g
        params = [f"a{k}" for k in range(len(w.loads))]
        tensors = C.tensor_params(g, w.loads, params)
        lines = C.launcher_head(self.name, params, f"{region.describe(g)}; {summary}")
        return params, tensors, C.float_ref(g, w.loads, params), lines + C.domain_lines(tensors, w.rank)

    def launcher(self, region: Region) -> str:
        w, g, name = self.w, self.g, self.name
        params, tensors, ref, lines = self.launcher_start(
            region, "rows cut into chunks: partial statistics, a combine per row, then the output pass over the chunks.")
        lines += chunk_lines(w.kept, w.red, TARGET_PROGRAMS)
        allocs, outs, strides = w.output_allocs(ref, f"{tensors[0]}.device")
        lines += allocs
        parts = [f"part{w.r.nodes.index(n)}" for n in self.reduces]
        dev = f"{tensors[0]}.device"
        lines += [f"    {p} = torch.empty((n_rows, n_split), dtype=torch.float32, device={dev})" for p in parts]
        n_vals = max(1, len(self.row_vals))
        lines.append(f"    rows = torch.empty((n_rows, {n_vals}), dtype=torch.float32, device={dev})")
        common = C.call_values(g, w.loads, params) + ["*domain"] + [f"*_strides({p}, domain)" for p in tensors]
        call1 = ", ".join(common + parts + ["n_red", "n_split", "chunk"])
        call2 = ", ".join(common + parts + outs + strides + ["rows", "n_red", "n_split", "chunk"])
        call3 = ", ".join(common + outs + strides + ["rows", "n_red", "chunk"])
        lines += ["    if n_rows > 0 and n_red > 0:",
                  f"        {name}_stats_kernel[(n_rows, n_split)]({call1}, BLOCK_R=block_r, num_warps={WARPS})",
                  f"        {name}_combine_kernel[(n_rows,)]({call2}, N_ROW_VALS={n_vals}, "
                  "BLOCK_S=_pow2(n_split), num_warps=1)",
                  f"        {name}_apply_kernel[(n_rows, n_split)]({call3}, N_ROW_VALS={n_vals}, BLOCK_R=block_r, "
                  f"num_warps={WARPS})",
                  f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
        return "\n".join(lines) + "\n"


def emit_chunked(template, graph: Graph, region: Region, name: str) -> Emitted:
    w = _Writer(template, graph, region, "chunked")
    c = _Chunked(w, name)
    kernels = helpers(w) + [c.stats_kernel(), c.combine_kernel(), c.apply_kernel()]
    doc = (f"{region.describe(graph)}: each row of dims {list(region.reduced)} cut into chunks across programs; "
           "partial statistics per chunk, one combine per row (Chan's rule for a variance), then the full-size "
           "outputs written chunk by chunk: two reads of the operands and one write, over rows x chunks programs.")
    return Emitted(kernels=kernels, launcher=c.launcher(region), launcher_name=name,
                   transformations=_transformations("chunked", graph, region), doc=doc)
