"""The row-wise template's cooperative variant: a long row's chunks meet inside one launch.

The chunked variant (``rowwise_chunked``) cuts rows into chunks and runs three kernels:
partial statistics, a combine per row, then the output pass, so its operands are read
twice from DRAM; a looped row reads twice too, and torch.compile's softmax and norms over
long rows read two or three times, the later reads from L2 when it still holds the row.
Here one kernel does all three. Each program loads its chunk of BLOCK_R elements into
registers once, stores the chunk's partials, counts itself in at its row's counter and
waits until every chunk of the row has arrived; then it combines the row's partials
itself (a few values, read past L1) and writes its outputs from the registers it holds.
DRAM sees one read and one write: the roofline floor. On the H100 (2026-12-06) such a
kernel ran group norms at 1.45-1.69x torch.compile and long-row softmaxes at 1.06-1.13x.

The wait needs a row's chunks resident together. The launch is one-dimensional with a
row's chunks consecutive and the GPU dispatches programs in launch order, so the earliest
unfinished row always has its chunks started or next in line; with at most one chunk a
row per SM (a program that fits at all fits once an SM) they are all resident at once and
the row finishes. Rows of more chunks than SMs, and the CPU interpreter (which runs
programs one after the other), take the same kernel as two launches instead (PHASE 1:
every chunk's partials; PHASE 2: combine and write): the same arithmetic, one more read.
"""
from __future__ import annotations

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_chunked import _Chunked, chunked_unavailable
from kernelrag.draft.lower.templates.rowwise_emit import _INIT, _transformations, _Writer, helpers
from kernelrag.draft.lower.templates.rowwise_passes import ONLINE_SOFTMAX
from kernelrag.draft.lower.templates.rowwise_sizes import row_counts, row_size_lines

MIN_ROW = 8192            # two chunks of the smallest configuration: one would be the registers variant
LONG_ROW = 32768          # worth a round from here: at 16384 the registers variant holds a row and ties
# (elements a chunk, held in registers: 32 fp32 a thread; warps), the first launched; the
# configuration search times the rest. On the H100 (2026-12-06, bench/coop_rows.py) 8192 at 8
# warps was the fastest or within 1% on 10 row tasks; 2048 at 4 was 5-30% slower.
COOP_CONFIGS = ((8192, 8), (4096, 4), (16384, 16), (8192, 16), (4096, 8))

BARRIER = '''@triton.jit
def _arrive_and_wait(count_ptr, row, n_split):
    """Count this program's chunk in at its row and wait until all n_split have arrived.
    The partials stored before it are visible to the row's other programs after it."""
    tl.debug_barrier()                                    # every thread's partials are stored
    tl.atomic_add(count_ptr + row, 1, sem="release")
    seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")
    while seen < n_split:
        seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")
    tl.debug_barrier()
'''


LANE_FLAGS = '''def _lane_flags(ins, outs, domain, red, block_r):
    """The cooperative kernel's constexpr layout flags, from each lane-level tensor's strides
    (``ins``, ``outs``: name -> strides over the domain): NAME_FLAT when its reduced dims form
    one run, so a lane's offset is r times the last stride; for operands, NAME_CHUNK when a chunk
    of block_r lanes reads one element (zero strides over every reduced dim a chunk spans), so
    it is loaded once a chunk."""
    flags = {}
    for name, stride in {**ins, **outs}.items():
        st, n = [stride[d] for d in red], [domain[d] for d in red]
        flags[name + "_FLAT"] = all(st[i] == n[i + 1] * st[i + 1] for i in range(len(red) - 1))
        if name in ins:
            inner, one = 1, True
            for s, m in zip(reversed(st), reversed(n)):
                if s != 0 and m != 1:
                    one = inner % block_r == 0
                    break
                inner *= m
            flags[name + "_CHUNK"] = one
    return flags
'''


class _CoopWriter(_Writer):
    """The row-wise writer with lane offsets chosen at launch where a row spans several dims. The
    generic split of a lane's index into per-dim indices, times each tensor's strides, costs an
    int array per tensor held across the wait; a tensor whose reduced dims form one run takes
    ``r * stride`` instead, and an operand constant over a chunk (a group norm's weight and bias,
    broadcast over the spatial dims) is one scalar load a chunk. The launcher sets the flags."""

    def __init__(self, t, graph: Graph, region: Region):
        super().__init__(t, graph, region, "coop")
        self.layout = len(self.red) > 1
        self.lane_ins = [k for k, n in enumerate(self.loads) if self.load_frame[n] == C.LANE]
        self.lane_outs = [k for k, n in enumerate(self.outs) if self.frames[n] == C.LANE]

    def flag_args(self) -> list[tuple[str, str]]:
        if not self.layout:
            return []
        return ([(f"IN{k}_FLAT: tl.constexpr, IN{k}_CHUNK: tl.constexpr", f"operand {k}: one run; one element a chunk")
                 for k in self.lane_ins]
                + [(f"OUT{k}_FLAT: tl.constexpr", f"output {k}: one run") for k in self.lane_outs])

    def flag_call(self, params: list[str]) -> str:
        """The launcher's expression for the flags (``params``: the launcher's name of each load,
        whose strides over the domain are ``st_<name>``)."""
        ins = ", ".join(f"\"IN{k}\": st_{params[k]}" for k in self.lane_ins)
        outs = ", ".join(f"\"OUT{k}\": out{k}.stride()" for k in self.lane_outs)
        return f"_lane_flags({{{ins}}}, {{{outs}}}, domain, {tuple(self.red)}, block_r)"

    def chunk(self, start: str, ind: str) -> list[str]:
        """EVEN (set at launch: the row is a whole number of chunks) makes the mask a constant the
        compiler drops: log_softmax's kernel 64 -> 48 registers on sm_90, the hand-written count.
        Where a row spans several dims, the chunk's own indices give the per-chunk offsets."""
        lines = super().chunk(start, ind, mask="tl.full([BLOCK_R], 1, tl.int1) if EVEN else r < n_red")
        if not self.layout:
            return lines
        lines.append(f"{ind}chunk_rest = {start}")
        for d in reversed(self.red):
            lines += [f"{ind}c{d} = chunk_rest % n{d}", f"{ind}chunk_rest = chunk_rest // n{d}"]
        return lines + [f"{ind}in{k}_chunk = " + " + ".join(f"c{d} * in{k}_s{d}" for d in self.red)
                        for k in self.lane_ins]

    def lane_offset(self, pre: str, k: int) -> str:
        split = super().lane_offset(pre, k)
        return f"r * {pre}{k}_s{self.red[-1]} if {pre.upper()}{k}_FLAT else {split}" if self.layout else split

    def node_line(self, nid: int, names: dict[int, str], ind: str, looped: bool, carries: dict) -> list[str]:
        if not (self.layout and nid in self.loads and self.load_frame[nid] == C.LANE):
            return super().node_line(nid, names, ind, looped, carries)
        k, kind = self.loads.index(nid), self.g[nid].kind
        names[nid] = f"v{nid}"
        one = C.load_expr(kind, f"in{k}_ptr + in{k}_row + in{k}_chunk", None)
        each = C.load_expr(kind, f"in{k}_ptr + in{k}_row + in{k}_lane", "rmask")
        return [f"{ind}v{nid} = {one} if IN{k}_CHUNK else {each}"]


def coop_unavailable(graph: Graph, region: Region) -> str | None:
    why = chunked_unavailable(graph, region)
    if why:
        return why
    if row_counts(region)[1] < MIN_ROW:
        return f"rows shorter than {MIN_ROW}: one program a row holds them"
    return None


def is_coop_worthwhile(region: Region) -> bool:
    """Rows of LONG_ROW elements or more: held in one program's registers they leave an SM one
    row in flight (0.73-0.78x torch.compile at 32768 on the H100, 2026-12-06), and looped they
    are read twice; at 16384 the registers variant ran within 1% of this one."""
    return row_counts(region)[1] >= LONG_ROW


def configs_source() -> str:
    rows = "".join(f"    triton.Config({{\"BLOCK_R\": {b}}}, num_warps={w}),\n" for b, w in COOP_CONFIGS)
    return ("# The cooperative kernel's chunk: BLOCK_R elements held in registers. It launches CONFIGS[0];\n"
            "# on a GPU the configuration search verifies the others and pins the fastest.\n"
            "CONFIGS = [\n" + rows + "]\n")


def _indented(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


class _Coop(_Chunked):
    def kernel(self) -> str:
        w = self.w
        head = w.row_head(outs=True)
        head = ["    pid = tl.program_id(0)", "    row = (pid // n_split).to(tl.int64)   # a row's chunks are consecutive",
                "    split = pid % n_split"] + self.workspace_lines() + head[1:]
        names = w.names()
        body = head + ["    lo = split * BLOCK_R", "    lanes = tl.arange(0, BLOCK_R)", "    chunk = BLOCK_R"]
        body += w.row_loads(names, "    ") + w.chunk("lo", "    ")
        lanes = dict(names)              # the chunk, loaded once: every later step reads these registers
        body += ["    # the chunk in registers: its loads and prologue"] + self.stats_lanes(lanes, "    ")
        body += ["    if PHASE != 2:   # the chunk's partials"]
        body += _indented(self.stats_ready(dict(names)) + self.stats_direct(lanes, "    "))
        body += ["    if PHASE == 0:   # one launch: wait for the row's other chunks",
                 "        _arrive_and_wait(count_ptr, row, n_split)"]
        body += ["    if PHASE != 1:   # the row's statistics from every chunk's partials, then this chunk's outputs"]
        combined = dict(names)
        body += _indented(self.combine_lines(combined, from_l2=True, first_only="split == 0"))
        row_names = {n: v for n, v in combined.items() if n not in names}
        body += _indented(self.apply_outputs({**lanes, **row_names}, "    "))
        args = w.operand_args(constant_reduced=len(w.red) > 1) + self.output_args()
        args += [("ws_ptr", "fp32 workspace, zeroed: each reduction's partials (n_rows, n_split), then the "
                  "int32 chunks arrived a row"), ("n_red", "elements per row"),
                 ("n_split", "chunks per row"), ("BLOCK_R: tl.constexpr", "elements per chunk, held in registers"),
                 ("BLOCK_S: tl.constexpr", "lanes over the chunks, >= n_split"),
                 ("PHASE: tl.constexpr", "0: one launch with the wait; 1 then 2: two launches, no wait"),
                 ("EVEN: tl.constexpr", "every chunk full: no lane masked")] + w.flag_args()
        return f"@triton.jit\ndef {self.name}_coop_kernel(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"

    def workspace_lines(self) -> list[str]:
        """Each reduction's partials and the row counters, carved out of the one zeroed workspace
        the launcher allocates (one allocation a call, not one a buffer: host microseconds)."""
        def at(k: int) -> str:      # the start of the k-th (n_rows, n_split) block
            return "ws_ptr" + ("" if k == 0 else " + n_cells" if k == 1 else f" + {k} * n_cells")

        lines = ["    n_cells = (tl.num_programs(0) // n_split).to(tl.int64) * n_split   # n_rows * n_split"]
        lines += [f"    part{self.w.r.nodes.index(n)}_ptr = {at(k)}" for k, n in enumerate(self.reduces)]
        return lines + [f"    count_ptr = ({at(len(self.reduces))}).to(tl.pointer_type(tl.int32), bitcast=True)"]

    def stats_direct(self, lanes: dict[int, str], ind: str) -> list[str]:
        """The chunk's partials reduced straight from its registers: a riding sum about the chunk's
        own max or mean (no running accumulators, which would hold the chunk several times over)."""
        w, g = self.w, self.g
        body = [f"{ind}n_c = tl.minimum(chunk, n_red - lo).to(tl.float32)   # elements of this chunk"]
        for nid in self.bases:
            j, fn, x = w.r.nodes.index(nid), g[nid].args["fn"], lanes[g[nid].inputs[0]]
            masked = f"tl.where(rmask, {x}, {_INIT[fn]})"
            body.append(f"{ind}p{j} = " + (f"tl.sum({masked}, axis=0)" if fn in ("sum", "mean")
                                            else f"tl.reduce({masked}, 0, _nan_{fn})"))
        for nid, rider in self.riders.items():
            j, b, y = w.r.nodes.index(nid), w.r.nodes.index(rider.base), lanes[rider.source]
            if rider.kind == ONLINE_SOFTMAX:    # the chunk's sum of exp(y - chunk max)
                body += [f"{ind}m_ref = tl.where(p{b} == float('-inf'), 0.0, p{b})",
                         f"{ind}p{j} = tl.sum(tl.where(rmask, tl.exp({y} - m_ref), 0.0), axis=0)"]
            else:                               # squared deviations about the chunk's own mean
                body += [f"{ind}dev = tl.where(rmask, {y} - p{b} / n_c, 0.0)",
                         f"{ind}p{j} = tl.sum(dev * dev, axis=0)"]
        return body + [f"{ind}tl.store(part{w.r.nodes.index(n)}_ptr + row * n_split + split, p{w.r.nodes.index(n)})"
                       for n in self.reduces]

    def launcher(self, region: Region) -> str:
        w, g, name = self.w, self.g, self.name
        params, tensors, ref, lines = self.launcher_start(
            region, "rows cut into chunks held in registers that combine their statistics inside one launch.")
        dev = f"{tensors[0]}.device"
        lines += row_size_lines(w.kept, w.red) + [
                  "    # at least two chunks a row: one would be the registers variant's program",
                  "    block_r = min(CONFIGS[0].kwargs[\"BLOCK_R\"], _pow2(max(_cdiv(n_red, 2), 1)))",
                  "    n_split = _cdiv(n_red, block_r)"]
        allocs, outs, strides = w.output_allocs(ref, dev)
        lines += allocs
        # one zeroed allocation: the reductions' fp32 partials, then an int32 counter a row
        lines.append(f"    ws = torch.zeros((n_rows * ({len(self.reduces)} * n_split + 1),), dtype=torch.float32, "
                     f"device={dev})")
        lines += [f"    st_{p} = _strides({p}, domain)" for p in tensors]
        if w.layout:
            lines.append(f"    flags = {w.flag_call(params)}")
        common = C.call_values(g, w.loads, params) + ["*domain"] + [f"*st_{p}" for p in tensors]
        call = ", ".join(common + outs + strides + ["ws", "n_red", "n_split"])
        lines += ["    if n_rows > 0 and n_red > 0:",
                  "        # one launch with the wait where a row's chunks surely fit on the GPU together (one",
                  "        # program an SM always fits); else two launches, no wait: the interpreter runs programs",
                  "        # one at a time, and a row of more chunks than SMs could wait for chunks never started",
                  f"        together = {dev}.type == \"cuda\" and n_split <= torch.cuda.get_device_properties({dev}).multi_processor_count",
                  "        # no FMA contraction: x * scale - max contracted keeps x live beside x * scale, a",
                  "        # second copy of the chunk (scaled_softmax: 101 registers a thread, not 67, on sm_90)",
                  "        for phase in ((0,) if together else (1, 2)):",
                  f"            {name}_coop_kernel[(n_rows * n_split,)]({call}, BLOCK_R=block_r, "
                  f"BLOCK_S=_pow2(n_split), PHASE=phase, EVEN=n_red % block_r == 0, num_warps=CONFIGS[0].num_warps, enable_fp_fusion=False{', **flags' if w.layout else ''})",
                  f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
        return "\n".join(lines) + "\n"


def emit_coop(template, graph: Graph, region: Region, name: str) -> Emitted:
    w = _CoopWriter(template, graph, region)
    c = _Coop(w, name)
    kernels = [configs_source()] + helpers(w) + ([LANE_FLAGS] if w.layout else []) + [BARRIER, c.kernel()]
    doc = (f"{region.describe(graph)}: each row of dims {list(region.reduced)} cut into chunks across consecutive "
           "programs of one launch; each chunk stores its partial statistics, waits at its row's counter for the "
           "others, combines them (Chan's rule for a variance) and writes its outputs from the chunk it just read: "
           "one DRAM read of the operands and one write.")
    return Emitted(kernels=kernels, launcher=c.launcher(region), launcher_name=name,
                   transformations=_transformations("coop", graph, region), doc=doc)
