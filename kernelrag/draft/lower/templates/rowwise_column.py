"""The row-wise template's column variant: a reduction that keeps the innermost dim.

When the reduced dims leave the domain's innermost dim alone (argmax over dim 1 of
(B, M, N), a mean over the sequence of (B, S, D)), one program per row walks a dim
strided by ``N * 4`` bytes: every warp load touches 32 cache lines, and the rows are
millions of tiny programs. Here a program owns BLOCK_K consecutive positions of the
innermost kept dim (one position of the outer kept dims) and walks the reduced dims in
[BLOCK_R, BLOCK_K] tiles: lanes run along the contiguous dim, so each warp reads whole
128-byte lines with 16-byte vector loads, and each reduction accumulates per lane of
the tile (a BLOCK_R-way tree at the end). One read of the operands, ``numel * 4`` bytes,
the minimum; the prologue is computed per tile, the epilogue per column.

Argmax and argmin follow torch: the first index of the extreme, a NaN beating every
number (the first NaN's index). Each tile lane sees the reduced indices in increasing
order, so a strict comparison keeps its first; across lanes the smallest index among
those holding the extreme wins.

Few column tiles (a sum over dims (0, 1) keeping a short last dim) would leave most of
the 132 SMs idle, and a few thousand would run their last wave part-empty (``MIN_TILES``):
the launcher then splits the reduced range into chunks (grid
``(tiles, n_split)``), stage 1 writes one partial per chunk and column (value, and index
for an arg reduction), and a combine kernel reduces the partials down the same column
tiles and applies the epilogue. Only one level of reductions qualifies (no reduction of
a reduction's result: that needs a pass per level), no scan, no full-size output.
"""
from __future__ import annotations

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_emit import _INIT, _Writer, emit_rowwise, helpers
from kernelrag.draft.lower.templates.rowwise_passes import cone
from kernelrag.draft.lower.templates.rowwise_split import _cone_all

COLUMN_FNS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin")
# fewer contiguous elements than this (64 bytes of fp32) fill under half a cache line per row
# of the tile: the row kernel's lanes along the reduced dim do as well
MIN_INNER = 16
# Fewer column tiles than this split the reduced range, so that the programs come in enough
# waves for the last, partly filled one to cost little: 132 SMs, 32 tiles each. An argmax tile
# (values and indices, 32 of each a thread) took 132 registers on sm_90 (ptxas), three resident
# programs an SM: argmax over dim 1 of (64, 4096, 4096) ran its 2048 tiles in 5.2 waves, the
# last 17% full, at 87% of the H200's read ceiling where torch.compile's kernel reached 91%
# (h200-2026-12-07-s7.json). Split, the programs come at least twice this many (the partials
# add 8 bytes a column a chunk, under 1% of the read at chunks of 4 tiles or more; the combine
# kernel adds a launch, a few microseconds, which a read of under 0.1 ms feels: not yet timed).
MIN_TILES = 4224
MIN_CHUNK_TILES = 4     # reduced rows a chunk, in tiles of BLOCK_R
MAX_SPLIT = 1024        # partials a column the combine kernel walks
TILE = 4096      # elements per [BLOCK_R, BLOCK_K] tile: 32 per thread at 4 warps
# one warp's 16-byte loads across 128 fp32 columns: four whole lines per row of the tile; wider
# tiles coalesce no better and make fewer programs (argmax over dim 1 of (64, 4096, 4096): 2048
# tiles of 128 against 1024 at 256, before the split of ``MIN_TILES``)
BLOCK_K_MAX = 128


def column_unavailable(graph: Graph, region: Region) -> str | None:
    inner = len(region.domain) - 1
    if inner in region.reduced:
        return "the innermost dim is reduced: no kept contiguous dim to put the lanes on"
    inside = set(region.nodes)
    reduces = [n for n in region.nodes if graph[n].op == "reduce"]
    if not reduces:
        return "no reduction to tile by columns"
    for n in region.nodes:
        node = graph[n]
        if node.op == "scan":
            return "a scan walks the reduced dim in order: the column variant does not carry it"
        if node.op == "reduce":
            if node.args["fn"] not in COLUMN_FNS:
                return f"{node.args['fn']} is not reduced by the column variant ({', '.join(COLUMN_FNS)})"
            if any(graph[c].op == "reduce" for c in _cone_all(graph, n, inside)):
                return "a reduction reads another reduction's result: the column variant makes one pass"
    if any(region.state["frames"][o] == C.LANE for o in region.outputs):
        return "the region writes a full-size output: the column variant makes one pass"
    return None


def is_column_worthwhile(region: Region) -> bool:
    """The rule from the shapes: the innermost dim is kept and long enough to fill cache lines."""
    return len(region.domain) - 1 not in region.reduced and region.domain[-1] >= MIN_INNER


class _Column:
    """The kernel texts of one column region, around a rowwise ``_Writer`` (its loads, frames, node lines)."""

    def __init__(self, w: _Writer):
        self.w, self.g = w, w.g
        self.inner = w.rank - 1
        self.outer = [d for d in w.kept if d != self.inner]
        self.reduces = [(j, n) for j, n in enumerate(w.r.nodes) if self.g[n].op == "reduce"]
        self.row_nodes = [n for n in w.r.nodes if w.frames[n] != C.LANE and self.g[n].op != "reduce"]
        reach = w.inside | set(w.loads)
        # what each stage reads: the prologue (the reductions' cones) and the epilogue (the outputs'),
        # so the partial kernel loads no epilogue operand and the combine kernel no prologue one
        self.prologue = {c for _, n in self.reduces for c in cone(self.g, n, reach)}
        self.epilogue_reads = {c for o in w.outs for c in [o] + cone(self.g, o, reach)}
        self.dens = [j for j, n in self.reduces if self.g[n].args.get("denom")]

    def common_args(self) -> list[tuple[str, str]]:
        return self.w.operand_args()

    def head(self, flat: bool) -> list[str]:
        """The program's column tile: outer kept indices (scalars) and the innermost lanes ([1, BLOCK_K]);
        ``flat``: also ``col``, the flat kept index that places a partial."""
        w = self.w
        lines = ["    pid = tl.program_id(0)",
                 "    kblk = pid % n_kblk",
                 "    outer = (pid // n_kblk).to(tl.int64)   # int64: column offsets may pass 2**31"]
        if self.outer:
            lines.append("    rest = outer")
            for d in reversed(self.outer):
                lines += [f"    i{d} = rest % n{d}", f"    rest = rest // n{d}"]
        lines += [f"    i{self.inner} = (kblk * BLOCK_K + tl.arange(0, BLOCK_K))[None, :]",
                  f"    kmask = i{self.inner} < n{self.inner}"]
        if flat:
            lines.append(f"    col = outer * n{self.inner} + i{self.inner}")
        for k in w.tensor_loads:
            lines.append(f"    in{k}_row = " + " + ".join(f"i{d} * in{k}_s{d}" for d in w.kept))
        return lines

    def row_loads(self, names: dict[int, str], reads: set[int]) -> list[str]:
        """Operands constant along the reduced dims (those in ``reads``): one [1, BLOCK_K] load per program."""
        lines = []
        for k, nid in enumerate(self.w.loads):
            if nid not in reads:
                continue
            if C.is_scalar(self.g, nid):
                names[nid] = f"in{k}"
            elif self.w.load_frame[nid] != C.LANE:
                names[nid] = f"v{nid}"
                lines.append(f"    v{nid} = " + C.load_expr(self.g[nid].kind, f"in{k}_ptr + in{k}_row", "kmask"))
        return lines

    def acc_init(self, shape: str) -> list[str]:
        lines = []
        for j, nid in self.reduces:
            fn = self.g[nid].args["fn"]
            lines.append(f"    acc{j} = tl.full({shape}, {_INIT[fn]}, tl.float32)")
            if fn in ("argmax", "argmin"):
                # int32: a reduced extent past 2**31 elements is not a tensor a GPU holds per column
                lines.append(f"    acc{j}_i = tl.zeros({shape}, tl.int32)")
        return lines

    def acc_update(self, j: int, fn: str, x: str, mask: str, index: str) -> list[str]:
        acc, masked = f"acc{j}", f"tl.where({mask}, {x}, {_INIT[fn]})"
        if fn in ("sum", "mean"):
            return [f"        {acc} += {masked}"]
        if fn in ("max", "min"):
            return [f"        {acc} = _nan_{fn}({acc}, {masked})"]      # torch: a NaN wins
        if fn == "prod":
            return [f"        {acc} *= {masked}"]
        cmp = ">" if fn == "argmax" else "<"
        return [f"        x{j} = {masked}",
                # strict: a lane keeps its first extreme; a NaN beats any number, the first NaN stays
                f"        better = (x{j} {cmp} {acc}) | ((x{j} != x{j}) & ({acc} == {acc}))",
                f"        {acc}_i = tl.where(better, {index}, {acc}_i)",
                f"        {acc} = tl.where(better, x{j}, {acc})"]

    def acc_final(self, j: int, fn: str, partial: bool) -> list[str]:
        """``r{j}`` (an arg reduction: ``r{j}_i``, and ``r{j}`` for a ``partial``): the column's
        value and index, [1, BLOCK_K]."""
        acc = f"acc{j}"
        if fn in ("sum", "mean"):
            return [f"    r{j} = tl.sum({acc}, axis=0)[None, :]"]
        if fn in ("max", "min"):
            return [f"    r{j} = tl.reduce({acc}, 0, _nan_{fn})[None, :]"]
        if fn == "prod":
            return [f"    r{j} = tl.reduce({acc}, 0, _mul_combine)[None, :]"]
        extreme, far = ("max", "float('-inf')") if fn == "argmax" else ("min", "float('inf')")
        return [f"    nan{j} = {acc} != {acc}",
                f"    any_nan{j} = tl.max(nan{j}.to(tl.int32), axis=0)[None, :] > 0",
                f"    best{j} = tl.{extreme}(tl.where(nan{j}, {far}, {acc}), axis=0)[None, :]",
                f"    hit{j} = tl.where(any_nan{j}, nan{j}, {acc} == best{j})",
                f"    r{j}_i = tl.min(tl.where(hit{j}, {acc}_i, n_red), axis=0)[None, :]"] + (
            [f"    r{j} = tl.where(any_nan{j}, float('nan'), best{j})"] if partial else [])

    def value(self, j: int, nid: int) -> str:
        fn = self.g[nid].args["fn"]
        return f"r{j}_i.to(tl.int64)" if fn in ("argmax", "argmin") else f"r{j}{self.w.scale(self.g[nid])}"

    def epilogue(self, names: dict[int, str], done: set[int]) -> list[str]:
        lines = []
        for j, nid in self.reduces:
            lines.append(f"    v{nid} = {self.value(j, nid)}")
            names[nid] = f"v{nid}"
            done.add(nid)
        lines += self.w.ready_rows([n for n in self.row_nodes if n in self.epilogue_reads], names, done, "    ")
        for k, nid in enumerate(self.w.outs):
            val = C.store_value(names[nid], self.g[nid].kind, f"out{k}_ptr")
            lines.append(f"    tl.store(out{k}_ptr + " + " + ".join(f"i{d} * out{k}_s{d}" for d in self.w.kept)
                         + f", {val}, mask=kmask)")
        return lines

    def tile_loop(self, names: dict[int, str], lo: str, hi: str, partial: bool) -> list[str]:
        """The walk down the reduced dims from ``lo`` to ``hi``, the prologue computed per tile."""
        w, g = self.w, self.g
        done = set(names)
        lines = w.ready_rows([n for n in self.row_nodes if n in self.prologue], names, done, "    ")
        lines += self.acc_init("[BLOCK_R, BLOCK_K]")
        lines.append(f"    for start in range({lo}, {hi}, BLOCK_R):")
        lines += w.chunk("start", "        ")
        lines.append("        rmask = rmask & kmask")
        local = dict(names)
        need = sorted({c for _, n in self.reduces for c in cone(g, n, w.inside | set(w.loads))
                       if c not in done and (w.frame(c) == C.LANE or c in w.loads)})
        for nid in need:
            lines += w.node_line(nid, local, "        ", True, {})
        for j, nid in self.reduces:
            lines += self.acc_update(j, g[nid].args["fn"], local[g[nid].inputs[0]], "rmask", "r")
        for j, nid in self.reduces:
            lines += self.acc_final(j, g[nid].args["fn"], partial)
        return lines

    def kernel(self, kname: str, args: list[tuple[str, str]], body: list[str]) -> str:
        return f"@triton.jit\ndef {kname}(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def out_args(self) -> list[tuple[str, str]]:
        w = self.w
        args = [(f"out{k}_ptr", f"output {k}, {w.frames[n]}-level") for k, n in enumerate(w.outs)]
        args += [(", ".join(f"out{k}_s{d}" for d in range(w.rank)), f"output {k}'s strides")
                 for k in range(len(w.outs))]
        return args

    def part_args(self) -> list[tuple[str, str]]:
        args = []
        for j, nid in self.reduces:
            args.append((f"part{j}_ptr", f"fp32 partials of reduction {j}, (n_split, n_cols)"))
            if self.g[nid].args["fn"] in ("argmax", "argmin"):
                args.append((f"part{j}_i_ptr", f"int32 indices of reduction {j}'s partials"))
        return args

    def tail_args(self) -> list[tuple[str, str]]:
        return [(f"den{j}", "divisor of a batch-mean (the batch size)") for j in self.dens] + [
            ("BLOCK_K: tl.constexpr", "lanes along the innermost kept dim (contiguous: coalesced loads)"),
            ("BLOCK_R: tl.constexpr", "positions of the reduced dims per tile")]

    def kernels(self, name: str) -> list[str]:
        w, g = self.w, self.g
        tiles = [("n_kblk", "column tiles along the innermost dim"), ("n_red", "elements per column")]
        # single stage: the whole reduced range, then the epilogue
        names = w.names()
        body = self.head(False) + ["    lanes = tl.arange(0, BLOCK_R)[:, None]"]
        body += self.row_loads(names, self.prologue | self.epilogue_reads)
        body += self.tile_loop(names, "0", "n_red", False) + self.epilogue(names, set(names))
        single = self.kernel(f"{name}_kernel", self.common_args() + self.out_args() + tiles + self.tail_args(), body)
        # stage 1: a chunk of the reduced range, one partial per column
        names = w.names()
        body = self.head(True) + ["    lanes = tl.arange(0, BLOCK_R)[:, None]", "    lo = tl.program_id(1) * chunk"]
        body += self.row_loads(names, self.prologue) + self.tile_loop(names, "lo", "lo + chunk", True)
        for j, nid in self.reduces:
            at = "tl.program_id(1).to(tl.int64) * n_cols + col"
            body.append(f"    tl.store(part{j}_ptr + {at}, r{j}, mask=kmask)")
            if g[nid].args["fn"] in ("argmax", "argmin"):
                body.append(f"    tl.store(part{j}_i_ptr + {at}, r{j}_i, mask=kmask)")
        partial = self.kernel(f"{name}_partial_kernel", self.common_args() + self.part_args() + tiles + [
            ("n_cols", "kept positions (a partial row's length)"), ("chunk", "reduced elements per split")]
            + self.tail_args()[len(self.dens):], body)
        # stage 2: the partials reduced down the same column tiles, then the epilogue
        names = w.names()
        body = self.head(True) + self.row_loads(names, self.epilogue_reads) + self.acc_init("[BLOCK_R, BLOCK_K]")
        body += ["    for s0 in range(0, n_split, BLOCK_R):",
                 "        s = (s0 + tl.arange(0, BLOCK_R))[:, None]",
                 "        smask = (s < n_split) & kmask",
                 "        at = s.to(tl.int64) * n_cols + col"]
        for j, nid in self.reduces:
            fn = g[nid].args["fn"]
            body.append(f"        p{j} = tl.load(part{j}_ptr + at, mask=smask, other={_INIT[fn]})")
            index = "0"
            if fn in ("argmax", "argmin"):
                body.append(f"        p{j}_i = tl.load(part{j}_i_ptr + at, mask=smask, other=0)")
                index = f"p{j}_i"
            body += self.acc_update(j, fn, f"p{j}", "smask", index)
        for j, nid in self.reduces:
            body += self.acc_final(j, g[nid].args["fn"], False)
        body += self.epilogue(names, set(names))
        combine = self.kernel(f"{name}_combine_kernel", self.common_args() + self.part_args() + self.out_args()
                              + tiles + [("n_cols", "kept positions"), ("n_split", "partials per column")]
                              + self.tail_args(), body)
        return helpers(w) + [single, partial, combine]


def emit_column(template, graph: Graph, region: Region, name: str) -> Emitted:
    """The column kernels, with the row kernel (``{name}_rows``) taking calls whose operand is not
    contiguous along the innermost dim (a permuted view: there the reduced dim is the contiguous one)."""
    col = _Column(_Writer(template, graph, region, "column"))
    rows = emit_rowwise(template, graph, region, "registers", f"{name}_rows")
    kernels = col.kernels(name)
    kernels += [k for k in rows.kernels if k not in kernels]
    return Emitted(kernels=kernels, launcher=rows.launcher + "\n\n" + _launcher(col, region, name),
                   launcher_name=name, transformations=_transformations(graph, region), doc=_doc(graph, region))


def _launcher(col: _Column, region: Region, name: str) -> str:
    w, g = col.w, col.g
    params = [f"a{k}" for k in range(len(w.loads))]
    tensors = C.tensor_params(g, w.loads, params)
    lane = next((p for nid, p in zip(w.loads, params) if not C.is_scalar(g, nid) and w.load_frame[nid] == C.LANE),
                tensors[0])
    ref = C.float_ref(g, w.loads, params)
    lines = C.launcher_head(name, params, f"{region.describe(g)}; column tiles along the innermost kept dim.")
    lines += C.domain_lines(tensors, w.rank)
    lines += [f"    if _strides({lane}, domain)[-1] != 1:   # lanes along the innermost dim would not coalesce",
              f"        return {name}_rows({', '.join(params)})",
              "    n_outer = " + (" * ".join(f"domain[{d}]" for d in col.outer) or "1"),
              f"    n_inner = domain[{col.inner}]",
              "    n_red = " + " * ".join(f"domain[{d}]" for d in w.red),
              "    n_cols = n_outer * n_inner"]
    keep_shape = "(" + ", ".join("1" if d in w.red else f"domain[{d}]" for d in range(w.rank)) + ",)"
    sq_shape = "(" + "".join(f"domain[{d}], " for d in w.kept) + ")"
    outs, strides = [], []
    for k, nid in enumerate(w.outs):
        shape = keep_shape if w.frames[nid] == C.ROW else sq_shape
        lines.append(f"    out{k} = torch.empty({shape}, dtype={C.dtype_code(g[nid].kind, ref)}, device={tensors[0]}.device)")
        strides.append(f"*out{k}.view({keep_shape}).stride()")
        outs.append(f"out{k}")
    for j in col.dens:
        lines.append(f"    den{j} = float(" + " * ".join(f"domain[{d}]" for d in g[region.nodes[j]].args["denom"]) + ")")
    lines += [f"    block_k = min({BLOCK_K_MAX}, _pow2(max(n_inner, 1)))",
              f"    block_r = max(1, min(_pow2(max(n_red, 1)), {TILE} // block_k))",
              "    n_kblk = _cdiv(n_inner, block_k)",
              "    n_tiles = n_outer * n_kblk",
              f"    n_split = 1 if n_tiles >= {MIN_TILES} else min(_cdiv(n_red, {MIN_CHUNK_TILES} * block_r), "
              f"_cdiv({2 * MIN_TILES}, max(n_tiles, 1)), {MAX_SPLIT})",
              "    chunk = _cdiv(_cdiv(n_red, max(n_split, 1)), block_r) * block_r",
              "    n_split = _cdiv(n_red, chunk) if n_red > 0 else 1"]
    common = C.call_values(g, w.loads, params) + ["*domain"] + [f"*_strides({p}, domain)" for p in tensors]
    tail = [f"den{j}" for j in col.dens]
    opts = "BLOCK_K=block_k, BLOCK_R=block_r, num_warps=4"
    parts = []
    for j, nid in col.reduces:
        parts.append(f"part{j}")
        if g[nid].args["fn"] in ("argmax", "argmin"):
            parts.append(f"part{j}_i")
    lines += ["    if n_cols == 0 or n_red == 0:   # nothing to launch (as the row kernel launches nothing)",
              f"        return {', '.join(outs)}{',' if len(outs) == 1 else ''}",
              "    if n_split == 1:",
              f"        {name}_kernel[(n_tiles,)]({', '.join(common + outs + strides + ['n_kblk', 'n_red'] + tail)}, {opts})",
              f"        return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
    for p in parts:
        dtype = "torch.int32" if p.endswith("_i") else "torch.float32"
        lines.append(f"    {p} = torch.empty((n_split, n_cols), dtype={dtype}, device={tensors[0]}.device)")
    lines += [f"    {name}_partial_kernel[(n_tiles, n_split)]({', '.join(common + parts + ['n_kblk', 'n_red', 'n_cols', 'chunk'])}, {opts})",
              f"    {name}_combine_kernel[(n_tiles,)]({', '.join(common + parts + outs + strides + ['n_kblk', 'n_red', 'n_cols', 'n_split'] + tail)}, {opts})",
              f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
    return "\n".join(lines) + "\n"


def _transformations(graph: Graph, region: Region) -> list[str]:
    out = ["tiling", "vectorized_loads", "fp32_accumulation", "tree_reduction", "two_pass_reduction"]
    if any(graph[n].op not in ("reduce", "squeeze_row") for n in region.nodes):
        out.append("elementwise_fusion")
    return out


def _doc(graph: Graph, region: Region) -> str:
    return (f"{region.describe(graph)}: reducing dims {list(region.reduced)} of a rank-{len(region.domain)} "
            "domain whose innermost dim is kept: each program owns BLOCK_K consecutive positions of it and walks "
            "the reduced dims in [BLOCK_R, BLOCK_K] tiles (coalesced, vectorised loads; one read of the operands); "
            f"fewer than {MIN_TILES} column tiles split the reduced range into chunks whose partials a second "
            "kernel combines.")
