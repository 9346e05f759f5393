"""The row-wise template's pipelined variant: persistent programs that copy their next rows ahead.

The registers variant holds a row of up to 16384 elements in one program; at 16 warps
that program takes 83-126 registers a thread (layer norm, sm_90), so its SM holds one or
two rows, and between a row's load and its store the SM has nothing in flight. On the
H200 (2026-12-07) the looped passes and torch.compile's two-loop kernel both ran layer
norm over rows of 16384 fp32 at 81% of the copy ceiling, where the H100 reached 92-95%:
the faster memory needs more bytes in flight an SM.

Here a grid of one program an SM takes every grid-th row in a ``tl.range`` loop with
``num_stages=STAGES``. Triton's software pipeliner turns the row's loads into ``cp.async``
copies into shared memory issued STAGES - 1 rows ahead (compiled for sm_90 on a CPU: no
``ld.global`` left for the row; 64 KB of shared memory a stage at 16384 fp32), so the next
rows stream in while this one is reduced and written. Operands constant over the rows (a
norm's weight and bias) are loaded once, before the loop, and stay in registers. DRAM sees
one read and one write of each row, the roofline floor. STAGES 1 is the registers
variant on a persistent grid. The stages and warps are the module's ``CONFIGS``: on a GPU
the configuration search times them.
"""
from __future__ import annotations

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import YIELDING_CONFIGS, Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_emit import _transformations, _Writer, helpers
from kernelrag.draft.lower.templates.rowwise_sizes import loops_at_traced_size, row_counts, row_limit

MIN_ROW = 8192          # from here the registers variant runs 16 warps: one or two rows an SM
MIN_ROWS = 1056         # eight rows a program on 132 SMs: a loop with rows to copy ahead
# (stages, warps), the first launched. At 16384 fp32 on sm_90 (ptxas, with a CPU): a layer
# norm's kernel at 32 warps takes 64 registers, at 16 warps 122-126, no spill (layer norm then
# ReLU plus x, which keeps x live to the end, spills 44-60 bytes); two and three stages take
# 64 and 128 KB of shared memory.
PIPED_CONFIGS = ((3, 32), (2, 32), (2, 16), (1, 16), (1, 32))
SMEM_BYTES = 196608     # of the 227 KB an sm_90 block may take: the stages' copies, ahead of the row


def piped_unavailable(t, graph: Graph, region: Region) -> str | None:
    if loops_at_traced_size(t, graph, region):
        return (f"rows longer than {row_limit(t, graph, region)} elements at the traced size loop: the pipelined "
                "kernel holds each row in registers")
    return None


def is_piped_worthwhile(region: Region) -> bool:
    """Many long rows: each program's loop has rows to copy ahead while it works on one."""
    rows, n_red = row_counts(region)
    return n_red >= MIN_ROW and rows >= MIN_ROWS


def configs_source() -> str:
    """The module-level ``CONFIGS`` list; it yields to another region's (whose launcher reads its
    keys unchecked), and the launcher then takes ``PIPED_CONFIGS[0]``."""
    rows = "".join(f"    triton.Config({{\"STAGES\": {s}}}, num_warps={w}),\n" for s, w in PIPED_CONFIGS)
    return (f"{YIELDING_CONFIGS}\n# The pipelined rows' stages (rows copied ahead, plus the one in registers) and warps. The\n"
            "# kernel launches CONFIGS[0]; on a GPU the configuration search verifies the others and pins\n"
            "# the fastest.\nCONFIGS = [\n" + rows + "]\n")


class _Piped:
    def __init__(self, w: _Writer, name: str):
        self.w, self.g, self.name = w, w.g, name
        dom = w.r.domain
        lane = [nid for nid in w.loads if w.load_frame[nid] == C.LANE]
        # constant over the rows: broadcast over every kept dim (size 1 where the domain's is not),
        # so loaded once before the loop; the launcher checks the strides at run time
        self.hoisted = [nid for nid in lane if any(dom[d] > 1 for d in w.kept) and all(
            C.aligned(self.g[nid].shape, w.rank)[d] == 1 for d in w.kept)]
        self.streamed = [nid for nid in lane if nid not in self.hoisted]

    def kernel(self) -> str:
        w, g = self.w, self.g
        names = w.names()
        body = ["    lanes = tl.arange(0, BLOCK_R)"] + w.chunk("0", "    ")
        for nid in self.hoisted:
            k = w.loads.index(nid)
            names[nid] = f"v{nid}"
            body.append(f"    v{nid} = " + C.load_expr(g[nid].kind, f"in{k}_ptr + in{k}_lane", "rmask")
                        + "   # the same for every row: loaded once")
        body += ["    for row_id in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):",
                 "        row = tl.cast(row_id, tl.int64)   # int64: row offsets may pass 2**31"]
        head = w.row_head(outs=True)[1:]
        body += ["    " + line for line in head]
        ind = "        "
        body += w.row_loads(names, ind) + w.held_row(names, list(self.streamed), ind)
        args = [C.operand_arg(g, k, nid, f"operand {k} ({g[nid].origin or g[nid].op}), {w.load_frame[nid]}-level"
                              + (", the same for every row" if nid in self.hoisted else ""))
                for k, nid in enumerate(w.loads)]
        args += [(f"out{k}_ptr", f"output {k}, {w.frames[nid]}-level") for k, nid in enumerate(w.outs)]
        args += [(f"n{d}", f"domain size of dim {d}{' (reduced)' if d in w.red else ''}") for d in range(w.rank)]
        args += [(", ".join(f"in{k}_s{d}" for d in range(w.rank)), f"operand {k}'s strides (0: broadcast)")
                 for k in w.tensor_loads]
        args += [(", ".join(f"out{k}_s{d}" for d in range(w.rank)), f"output {k}'s strides") for k in range(len(w.outs))]
        args += [("n_rows", "rows (product of the kept sizes)"), ("n_red", "elements per row"),
                 ("BLOCK_R: tl.constexpr", "lanes: the row, a power of two >= n_red"),
                 ("STAGES: tl.constexpr", "rows in the pipeline: STAGES - 1 copied ahead into shared memory")]
        return f"@triton.jit\ndef {self.name}_kernel(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def launcher(self, region: Region) -> str:
        w, g, name = self.w, self.g, self.name
        params = [f"a{k}" for k in range(len(w.loads))]
        tensors = C.tensor_params(g, w.loads, params)
        ref = C.float_ref(g, w.loads, params)
        dev = f"{tensors[0]}.device"
        limit = row_limit(w.t, g, region)
        lines = C.launcher_head(name, params, f"{region.describe(g)}; persistent programs, the next rows copied "
                                              "ahead into shared memory.")
        lines += C.domain_lines(tensors, w.rank)
        lines += ["    n_rows = " + (" * ".join(f"domain[{d}]" for d in w.kept) or "1"),
                  "    n_red = " + " * ".join(f"domain[{d}]" for d in w.red),
                  f"    if n_red > {limit}:",
                  f"        raise ValueError(f\"rows of {{n_red}} elements exceed {limit}: this kernel holds each row in "
                  "registers; lower the task at this size for the looped variant\")"]
        for nid in self.hoisted:
            p = params[w.loads.index(nid)]
            lines += [f"    if any(_strides({p}, domain)[d] and domain[d] > 1 for d in {tuple(w.kept)!r}):",
                      f"        raise ValueError(\"{p} varies over the rows: this kernel loads it once for every row; \"",
                      "                         \"lower the task at this size\")"]
        allocs, outs, strides = w.output_allocs(ref, dev)
        lines += allocs
        row_bytes = " + ".join(f"{params[w.loads.index(n)]}.element_size()" for n in self.streamed) or "0"
        lines += ["    own = \"STAGES\" in CONFIGS[0].kwargs      # else the list is another region's: the table's first row",
                  f"    stages, warps = (CONFIGS[0].kwargs[\"STAGES\"], CONFIGS[0].num_warps) if own else {PIPED_CONFIGS[0]!r}",
                  "    block_r = _pow2(n_red)",
                  "    # the rows copied ahead must fit shared memory beside the kernel's own",
                  f"    stages = max(1, min(stages, 1 + {SMEM_BYTES} // max(1, block_r * ({row_bytes}))))",
                  f"    programs = torch.cuda.get_device_properties({dev}).multi_processor_count if {dev}.type == \"cuda\" else 4",
                  "    call_warps = warps if block_r >= 32 * warps else 4   # a short row (a smaller size): 4 warps"]
        call = ", ".join(C.call_values(g, w.loads, params) + outs + ["*domain"]
                         + [f"*_strides({p}, domain)" for p in tensors] + strides + ["n_rows", "n_red"])
        lines += ["    if n_rows > 0 and n_red > 0:",
                  f"        {name}_kernel[(min(n_rows, programs),)]({call}, BLOCK_R=block_r, STAGES=stages, "
                  "num_warps=call_warps)",
                  f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
        return "\n".join(lines) + "\n"


def emit_piped(template, graph: Graph, region: Region, name: str) -> Emitted:
    w = _Writer(template, graph, region, "piped")
    p = _Piped(w, name)
    doc = (f"{region.describe(graph)}: a persistent grid of one program an SM, each taking every grid-th row of "
           f"dims {list(region.reduced)} held in registers; the rows' loads are software-pipelined (cp.async into "
           f"shared memory, STAGES - 1 rows ahead) and {len(p.hoisted)} operand(s) constant over the rows are "
           "loaded once: one DRAM read and one write of each row.")
    return Emitted(kernels=[configs_source()] + helpers(w) + [p.kernel()], launcher=p.launcher(region),
                   launcher_name=name, transformations=_transformations("piped", graph, region), doc=doc)
