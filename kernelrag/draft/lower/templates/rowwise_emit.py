"""The row-wise template's kernel text and launcher (the placement is in ``rowwise``)."""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise, node_expr
from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import VARIANT_TRANSFORMATION, Emitted, Region
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_passes import ONLINE_SOFTMAX, SHIFTED_VAR, Rider, cone, plan_passes
from kernelrag.draft.lower.templates import rowwise_sizes as S
from kernelrag.draft.lower.templates.rowwise_sizes import LOOP_BLOCK, LOOP_WARPS_LONG, WIDE_LOOP_ROW, loops_at_traced_size, row_limit

_INIT = {"sum": "0.0", "mean": "0.0", "max": "float('-inf')", "min": "float('inf')", "prod": "1.0",
         "argmax": "float('-inf')", "argmin": "float('inf')"}

MUL_COMBINE = '''@triton.jit
def _mul_combine(a, b):
    # the combine of a product reduction or scan: tl.reduce / tl.associative_scan call it
    return a * b
'''
NAN_EXTREMES = {fn: f'''@triton.jit
def _nan_{fn}(a, b):
    # {fn} as torch computes it, a NaN wins: tl.{op} and tl.{fn} drop NaNs on a GPU
    return tl.where((a != a) | (b != b), float("nan"), tl.{op}(a, b))
''' for fn, op in (("max", "maximum"), ("min", "minimum"))}


def helpers(w: "_Writer") -> list[str]:
    """The combine functions a region's kernels call, emitted once before them (only those
    called: the verifier's static check warns about a kernel that is never launched)."""
    return ([MUL_COMBINE] if w.uses_prod else []) + [NAN_EXTREMES[fn] for fn in ("max", "min")
                                                     if fn in w.uses_extremes]


class _Writer:
    def __init__(self, t, graph: Graph, region: Region, variant: str):
        self.t, self.g, self.r, self.variant = t, graph, region, variant
        self.frames = region.state["frames"]
        self.rank = len(region.domain)
        self.red = region.reduced
        self.kept = [d for d in range(self.rank) if d not in self.red]
        self.loads = region.loads
        self.tensor_loads = [k for k, n in enumerate(self.loads) if not C.is_scalar(graph, n)]   # by position
        self.load_frame = {i: t._frame(graph, region, i) for i in self.loads}
        self.outs = region.outputs
        self.inside = set(region.nodes)
        self.uses_prod = any(graph[n].args.get("fn") in ("prod", "cumprod") for n in region.nodes)
        self.uses_extremes = {graph[n].args.get("fn") for n in region.nodes
                              if graph[n].op == "reduce" and graph[n].args.get("fn") in ("max", "min")}

    def row_head(self, outs: bool) -> list[str]:
        """A program's row: its kept indices, and each operand's (and output's) offset to the row."""
        lines = ["    row = tl.program_id(0).to(tl.int64)   # int64: row offsets may pass 2**31"]
        if self.kept:
            lines.append("    rest = row")
            for d in reversed(self.kept):
                lines += [f"    i{d} = rest % n{d}", f"    rest = rest // n{d}"]
        lines += [f"    in{k}_row = " + (" + ".join(f"i{d} * in{k}_s{d}" for d in self.kept) or "0") for k in self.tensor_loads]
        return lines + [f"    out{k}_row = " + (" + ".join(f"i{d} * out{k}_s{d}" for d in self.kept) or "0")
                        for k in range(len(self.outs)) if outs]

    def operand_args(self, constant_reduced: bool = False) -> list[tuple[str, str]]:
        """The arguments every kernel of the region opens with: operands, domain sizes, operand strides.
        ``constant_reduced``: the reduced dims' sizes are compile-time constants, so a lane's index
        split (``r % n``, ``r // n``) compiles to multiplies and shifts instead of integer divisions
        (tens of instructions each, a lane's whole budget on a memory-bound kernel); a kernel is
        then compiled per row shape."""
        g = self.g
        args = [C.operand_arg(g, k, n, f"operand {k} ({g[n].origin or g[n].op}), {self.load_frame[n]}-level")
                for k, n in enumerate(self.loads)]
        args += [(f"n{d}: tl.constexpr" if constant_reduced and d in self.red else f"n{d}",
                  f"domain size of dim {d}{' (reduced)' if d in self.red else ''}") for d in range(self.rank)]
        args += [(", ".join(f"in{k}_s{d}" for d in range(self.rank)), f"operand {k}'s strides (0: broadcast)")
                 for k in self.tensor_loads]
        return args

    def output_allocs(self, ref: str, device: str) -> tuple[list[str], list[str], list[str]]:
        """(launcher lines allocating the outputs: full-size, kept dims as 1, or squeezed; their names;
        their stride arguments, a squeezed output's read through its kept-dims view)."""
        keep_shape = "(" + ", ".join("1" if d in self.red else f"domain[{d}]" for d in range(self.rank)) + ",)"
        sq_shape = "(" + "".join(f"domain[{d}], " for d in self.kept) + ")"
        lines, outs, strides = [], [], []
        for k, nid in enumerate(self.outs):
            fr = self.frames[nid]
            shape = "domain" if fr == C.LANE else keep_shape if fr == C.ROW else sq_shape
            lines.append(f"    out{k} = torch.empty({shape}, dtype={C.dtype_code(self.g[nid].kind, ref)}, device={device})")
            strides.append(f"*out{k}.view({keep_shape}).stride()" if fr == C.SQUEEZED else f"*out{k}.stride()")
            outs.append(f"out{k}")
        return lines, outs, strides

    def frame(self, nid: int) -> str | None:
        return self.frames.get(nid) or self.load_frame.get(nid)

    def names(self) -> dict[int, str]:
        return C.const_names(self.g, [i for n in self.r.nodes for i in self.g[n].inputs])

    # ------------------------------------------------------------------ kernel pieces
    def chunk(self, start: str, ind: str, mask: str = "r < n_red") -> list[str]:
        lines = [f"{ind}r = {start} + lanes", f"{ind}rmask = {mask}"]
        if self.r.state["reverse"]:
            lines.append(f"{ind}r = n_red - 1 - r          # a reverse scan walks the row from its end")
        if len(self.red) == 1:
            lines.append(f"{ind}i{self.red[0]} = r")
        else:
            # its own name: ``rest`` of the row index is int64 and a loop-carried Triton
            # variable must keep one type (the interpreter does not check this)
            lines.append(f"{ind}lane_rest = r")
            for d in reversed(self.red):
                lines += [f"{ind}i{d} = lane_rest % n{d}", f"{ind}lane_rest = lane_rest // n{d}"]
        lane = [("in", k) for k, nid in enumerate(self.loads) if self.load_frame[nid] == C.LANE]
        lane += [("out", k) for k, nid in enumerate(self.outs) if self.frames[nid] == C.LANE]
        return lines + [f"{ind}{pre}{k}_lane = {self.lane_offset(pre, k)}" for pre, k in lane]

    def lane_offset(self, pre: str, k: int) -> str:
        """A lane's offset into operand (``pre`` "in") or output ("out") ``k`` past its row."""
        return " + ".join(f"i{d} * {pre}{k}_s{d}" for d in self.red)

    def node_line(self, nid: int, names: dict[int, str], ind: str, looped: bool, carries: dict) -> list[str]:
        node = self.g[nid]
        var = f"v{nid}"
        if nid in self.loads:
            k = self.loads.index(nid)
            names[nid] = var
            return [f"{ind}{var} = " + C.load_expr(node.kind, f"in{k}_ptr + in{k}_row + in{k}_lane", "rmask",
                                                   getattr(self, "evict", None) if looped else None)]
        if node.op == "iota":
            names[nid] = f"i{node.args['dim']}"
            return []
        if node.op == "squeeze_row":
            names[nid] = names[node.inputs[0]]
            return []
        x = names.get(node.inputs[0]) if node.inputs else None
        names[nid] = var
        if is_elementwise(node):
            return [f"{ind}{var} = {node_expr(self.g, node, names)}"]
        if node.op == "scan":
            fn = node.args["fn"]
            masked = f"tl.where(rmask, {x}, 0.0)" if fn == "cumsum" else \
                f"tl.where(rmask, {x}, 1.0).to(tl.float64)"   # a tree of partial products overflows fp32 early
            scan = f"tl.cumsum({masked}, axis=0)" if fn == "cumsum" else \
                f"tl.associative_scan({masked}, 0, _mul_combine)"
            if not looped:
                return [f"{ind}{var} = {scan}"]
            carry = carries[nid]
            if fn == "cumsum":
                return [f"{ind}{var} = {scan} + {carry}", f"{ind}{carry} += tl.sum({masked}, axis=0)"]
            return [f"{ind}{var} = {scan} * {carry}", f"{ind}{carry} *= tl.reduce({masked}, 0, _mul_combine)"]
        if node.op == "reduce":
            return [f"{ind}{var} = {self.reduce_expr(node, x)}"]
        raise ValueError(f"rowwise cannot emit {node.label()}")

    def scale(self, node) -> str:
        if node.args.get("denom") is not None:
            return f" / den{self.r.nodes.index(node.id)}"
        return " / n_red" if node.args["fn"] == "mean" else ""

    def reduce_expr(self, node, x: str) -> str:
        fn = node.args["fn"]
        masked = f"tl.where(rmask, {x}, {_INIT[fn]})"
        if fn in ("sum", "mean"):
            return f"tl.sum({masked}, axis=0){self.scale(node)}"
        if fn in ("max", "min"):
            return f"tl.reduce({masked}, 0, _nan_{fn})"
        if fn == "prod":
            return f"tl.reduce({masked}, 0, _mul_combine)"
        nan = f"((({x}) != ({x})) & rmask).to(tl.int32)"      # torch: the first NaN is the extreme
        return f"tl.where(tl.max({nan}, axis=0) > 0, tl.argmax({nan}, axis=0), tl.{fn}({masked}, axis=0)).to(tl.int64)"

    def stores(self, names: dict[int, str], ind: str, frames: set[str]) -> list[str]:
        lines = []
        for k, nid in enumerate(self.outs):
            fr = self.frames[nid]
            if fr not in frames:
                continue
            val = C.store_value(names[nid], self.g[nid].kind, f"out{k}_ptr")
            if fr == C.LANE:
                lines.append(f"{ind}tl.store(out{k}_ptr + out{k}_row + out{k}_lane, {val}, mask=rmask)")
            else:
                lines.append(f"{ind}tl.store(out{k}_ptr + out{k}_row, {val})")
        return lines

    def row_loads(self, names: dict[int, str], ind: str) -> list[str]:
        lines = []
        for k, nid in enumerate(self.loads):
            if C.is_scalar(self.g, nid):
                names[nid] = f"in{k}"
            elif self.load_frame[nid] != C.LANE:
                names[nid] = f"v{nid}"
                lines.append(f"{ind}v{nid} = " + C.load_expr(self.g[nid].kind, f"in{k}_ptr + in{k}_row", None))
        return lines

    def registers_path(self, ind: str) -> list[str]:
        """The row held whole, each lane-level operand loaded where first used (not live across reductions)."""
        names = self.names()
        pending = [nid for nid in self.loads if self.load_frame[nid] == C.LANE]
        return self.row_loads(names, ind) + self.chunk("0", ind) + self.held_row(names, pending, ind)

    def held_row(self, names: dict[int, str], pending: list[int], ind: str) -> list[str]:
        """The region's nodes on a row held whole, each operand of ``pending`` loaded where first used, then the stores."""
        lines = []
        for nid in self.r.nodes + [None]:        # None: the operands stored unchanged, last
            for i in [i for i in dict.fromkeys(self.g[nid].inputs if nid is not None else pending) if i in pending]:
                pending.remove(i)
                lines += self.node_line(i, names, ind, False, {})
            lines += self.node_line(nid, names, ind, False, {}) if nid is not None else []
        return lines + self.stores(names, ind, {C.LANE, C.ROW, C.SQUEEZED})

    def ready_rows(self, row_nodes: list[int], names: dict[int, str], done: set[int], ind: str) -> list[str]:
        lines = []
        for rn in row_nodes:
            if rn not in done and all(i in names for i in self.g[rn].inputs):
                lines += self.node_line(rn, names, ind, False, {})
                done.add(rn)
        return lines

    def acc_init(self, nid: int, rider: Rider | None, ind: str) -> list[str]:
        fn, j = self.g[nid].args["fn"], self.r.nodes.index(nid)
        lines = [f"{ind}acc{j} = tl.full([BLOCK_R], {_INIT[fn]}, tl.float32)"]
        if fn in ("argmax", "argmin"):
            lines.append(f"{ind}acc{j}_i = tl.zeros([BLOCK_R], tl.int64)")
        if rider is not None and rider.kind == SHIFTED_VAR:
            lines += [f"{ind}acc{j}_sq = tl.zeros([BLOCK_R], tl.float32)",
                      f"{ind}acc{j}_n = tl.zeros([BLOCK_R], tl.float32)",
                      f"{ind}acc{j}_k = tl.zeros([BLOCK_R], tl.float32)"]
        return lines

    def acc_update(self, nid: int, x: str, on_top: list[int], riders: dict, ind: str) -> list[str]:
        fn, acc = self.g[nid].args["fn"], f"acc{self.r.nodes.index(nid)}"
        masked = f"tl.where(rmask, {x}, {_INIT[fn]})"
        lines = []
        if fn in ("sum", "mean"):
            lines.append(f"{ind}{acc} += {masked}")
        elif fn in ("max", "min") and not on_top:
            lines.append(f"{ind}{acc} = _nan_{fn}({acc}, {masked})")
        elif fn == "max":      # online softmax: one exponential a lane, exp(-|x - max|), rescales the
            # riding sum where the lane's max grows and else adds the value's term
            lines += [f"{ind}x_max = {masked}", f"{ind}grows = x_max > {acc}", f"{ind}m_new = tl.maximum({acc}, x_max)",
                      f"{ind}e = tl.exp(tl.where(grows, {acc} - x_max, x_max - {acc}))",
                      f"{ind}e = tl.where(m_new == float('-inf'), 0.0, e)   # no finite value yet: sums stay 0"]
            lines += [f"{ind}{r} = tl.where(grows, {r} * e + 1.0, {r} + e)" for r in
                      (f"acc{self.r.nodes.index(rid)}" for rid in on_top)] + [f"{ind}{acc} = m_new"]
        elif fn == "prod":
            lines.append(f"{ind}{acc} *= {masked}")
        else:
            cmp = ">" if fn == "argmax" else "<"     # a lane's first NaN beats everything after it
            lines += [f"{ind}better = ({masked} {cmp} {acc}) | (({masked} != {masked}) & ({acc} == {acc}))",
                      f"{ind}{acc}_i = tl.where(better, r.to(tl.int64), {acc}_i)",
                      f"{ind}{acc} = tl.where(better, {masked}, {acc})"]
        for rid in on_top:
            if riders[rid].kind == SHIFTED_VAR:     # sums about k, each lane's first value
                racc = f"acc{self.r.nodes.index(rid)}"
                lines += [f"{ind}{racc}_k = tl.where(start == 0, {x}, {racc}_k)",
                          f"{ind}dev = tl.where(rmask, {x} - {racc}_k, 0.0)",
                          f"{ind}{racc} += dev", f"{ind}{racc}_sq += dev * dev",
                          f"{ind}{racc}_n += rmask.to(tl.float32)"]
        return lines

    def acc_final(self, nid: int, rider: Rider | None, ind: str) -> list[str]:
        node = self.g[nid]
        fn, acc, var = node.args["fn"], f"acc{self.r.nodes.index(nid)}", f"v{nid}"
        if rider is not None and rider.kind == ONLINE_SOFTMAX:
            base = f"acc{self.r.nodes.index(rider.base)}"
            return [f"{ind}{var} = tl.sum({acc} * tl.exp({base} - v{rider.base}), axis=0){self.scale(node)}"]
        if rider is not None:      # sum of (y - mean)^2 = sum((y-k)^2) - 2 (mean-k) sum(y-k) + n (mean-k)^2
            return [f"{ind}dmk = v{rider.base} - {acc}_k",
                    f"{ind}{var} = tl.maximum(tl.sum({acc}_sq - 2.0 * dmk * {acc} + {acc}_n * dmk * dmk, axis=0), 0.0)"
                    f"{self.scale(node)}"]
        if fn in ("sum", "mean"):
            return [f"{ind}{var} = tl.sum({acc}, axis=0){self.scale(node)}"]
        if fn in ("max", "min"):
            return [f"{ind}{var} = tl.reduce({acc}, 0, _nan_{fn}){self.scale(node)}"]
        if fn == "prod":
            return [f"{ind}{var} = tl.reduce({acc}, 0, _mul_combine)"]
        best = "tl.max" if fn == "argmax" else "tl.min"
        return [f"{ind}best = {best}({acc}, axis=0)",
                f"{ind}first_nan = tl.min(tl.where({acc} != {acc}, {acc}_i, n_red), axis=0)",
                f"{ind}{var} = tl.where(first_nan < n_red, first_nan, "
                f"tl.min(tl.where({acc} == best, {acc}_i, n_red), axis=0))"]

    def looped_path(self, ind: str) -> list[str]:
        names = self.names()
        lines = self.row_loads(names, ind)
        done = set(names)
        row_ready = [n for n in self.r.nodes if self.frames[n] != C.LANE and self.g[n].op != "reduce"]
        lines += self.ready_rows(row_ready, names, done, ind)      # row scalars of row operands only

        def cone_lines(targets: list[int], inner: str, carries: dict) -> list[str]:
            need: list[int] = []
            for t in targets:
                for c in reversed(cone(self.g, t, self.inside | set(self.loads))):
                    if c not in need and c not in done:
                        need.append(c)
                if t not in need and t not in done and self.frame(t) == C.LANE:
                    need.append(t)
            need.sort()
            out = []
            local = dict(names)
            for nid in need:
                if self.frame(nid) == C.LANE or nid in self.loads:
                    out += self.node_line(nid, local, inner, True, carries)
            names.update({k: v for k, v in local.items() if self.frame(k) != C.LANE})
            self._local = local
            return out

        passes, riders = plan_passes(self.g, self.r, ride=self.variant != "three_pass")
        self.evict = "evict_last" if self.variant == "three_pass" else None   # the row is read again
        for k, group in enumerate(passes):
            fns = ", ".join(f"{self.g[n].args['fn']}{' (' + riders[n].kind + ')' if n in riders else ''}"
                            for n in group)
            lines.append(f"{ind}# pass {k}: {fns} over the row, the prologue recomputed per chunk")
            for nid in group:
                lines += self.acc_init(nid, riders.get(nid), ind)
            lines.append(f"{ind}for start in range(0, n_red, BLOCK_R):")
            inner = ind + "    "
            lines += self.chunk("start", inner)
            lines += cone_lines([riders[n].source if n in riders else self.g[n].inputs[0] for n in group], inner, {})
            value = {n: self._local.get(self.g[n].inputs[0], names.get(self.g[n].inputs[0])) for n in group}
            for nid in group:
                if nid in riders:
                    continue
                on_top = [r for r in group if r in riders and riders[r].base == nid]
                lines += self.acc_update(nid, value[nid], on_top, riders, inner)
            for nid in group:
                lines += self.acc_final(nid, riders.get(nid), ind)
                names[nid] = f"v{nid}"
                done.add(nid)
            lines += self.ready_rows(row_ready, names, done, ind)   # row scalars now computable
        lane_outs = [n for n in self.outs if self.frames[n] == C.LANE]
        if lane_outs:
            carries = {n: f"carry{n}" for n in self.r.nodes if self.g[n].op == "scan"}
            lines.append(f"{ind}# last pass: the outputs")
            self.evict = "evict_first" if self.variant == "three_pass" else None   # its last read
            for n, c in carries.items():
                lines.append(f"{ind}{c} = " + ("tl.zeros((), tl.float32)" if self.g[n].args["fn"] == "cumsum"
                                               else "tl.full((), 1.0, tl.float64)"))
            lines.append(f"{ind}for start in range(0, n_red, BLOCK_R):")
            inner = ind + "    "
            lines += self.chunk("start", inner) + cone_lines(lane_outs, inner, carries)
            lines += self.stores(self._local, inner, {C.LANE})
        return lines + self.stores(names, ind, {C.ROW, C.SQUEEZED})


def emit_rowwise(t, graph: Graph, region: Region, variant: str, name: str,
                 fallback: tuple[str, str] | None = None) -> Emitted:
    """One program per row; ``fallback``: (a condition on ``n_rows`` and ``n_red``, the launcher
    that takes the call instead when it holds at run time)."""
    w = _Writer(t, graph, region, variant)
    looped_ok = t.unavailable(graph, region, "looped") is None
    args: list[tuple[str, str]] = []
    for k, nid in enumerate(w.loads):
        args.append(C.operand_arg(graph, k, nid, f"operand {k} ({graph[nid].origin or graph[nid].op}), "
                                                 f"{w.load_frame[nid]}-level"))
    for k, nid in enumerate(w.outs):
        args.append((f"out{k}_ptr", f"output {k}, {w.frames[nid]}-level"))
    args += [(f"n{d}", f"domain size of dim {d}{' (reduced)' if d in w.red else ''}") for d in range(w.rank)]
    for k in w.tensor_loads:
        args.append((", ".join(f"in{k}_s{d}" for d in range(w.rank)), f"operand {k}'s strides (0: broadcast)"))
    for k in range(len(w.outs)):
        args.append((", ".join(f"out{k}_s{d}" for d in range(w.rank)), f"output {k}'s strides"))
    args.append(("n_red", "elements per row (product of the reduced sizes)"))
    dens = [j for j, n in enumerate(region.nodes) if graph[n].op == "reduce" and graph[n].args.get("denom")]
    args += [(f"den{j}", "divisor of a batch-mean (the batch size)") for j in dens]
    args += [("BLOCK_R: tl.constexpr", "lanes per chunk; >= n_red when ROW_IN_REGISTERS"),
             ("ROW_IN_REGISTERS: tl.constexpr", "True: the whole row is one block, read once")]
    kname = f"{name}_kernel"
    body = w.row_head(outs=True) + ["    lanes = tl.arange(0, BLOCK_R)"]
    if looped_ok:
        body.append("    if ROW_IN_REGISTERS:")
        body += w.registers_path("        ")
        body.append("    else:")
        body += w.looped_path("        ")
    else:
        body += w.registers_path("    ")
    kernel = (f"@triton.jit\ndef {kname}(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n")
    configs = S.long_rows_at_traced_size(t, graph, region, variant, looped_ok)
    return Emitted(kernels=([S.configs_source(S.row_counts(region)[1])] if configs else []) + helpers(w) + [kernel],
                   launcher=_launcher(w, region, name, kname, variant, looped_ok, dens, fallback, configs),
                   launcher_name=name, transformations=_transformations(_as_run(w, variant, looped_ok),
                                                                        graph, region),
                   doc=_doc(graph, region, variant))


def _launcher(w: _Writer, region: Region, name: str, kname: str, variant: str, looped_ok: bool,
              dens: list[int], fallback: tuple[str, str] | None, configs: bool = False) -> str:
    g = w.g
    params = [f"a{k}" for k in range(len(w.loads))]
    tensors = C.tensor_params(g, w.loads, params)
    ref = C.float_ref(g, w.loads, params)
    lines = C.launcher_head(name, params, f"{region.describe(g)}; one program per row of the kept dims.")
    lines += C.domain_lines(tensors, w.rank)
    kept = " * ".join(f"domain[{d}]" for d in w.kept) or "1"
    lines += [f"    n_rows = {kept}", "    n_red = " + " * ".join(f"domain[{d}]" for d in w.red)]
    if fallback:
        lines += [f"    if {fallback[0]}:   # one program per row would leave most SMs idle",
                  f"        return {fallback[1]}({', '.join(params)})"]
    allocs, outs, strides = w.output_allocs(ref, f"{tensors[0]}.device")
    lines += allocs
    if variant in ("looped", "three_pass") and looped_ok:
        lines += ["    fits = False", f"    block_r = min({LOOP_BLOCK} if n_red >= {WIDE_LOOP_ROW} else 1024, _pow2(n_red))"]
    else:
        limit = row_limit(w.t, g, region) if looped_ok else 65536
        lines += [f"    fits = n_red <= {limit}"]
        if not looped_ok:
            lines += ["    if not fits:",
                      f"        raise ValueError(f\"rows of {{n_red}} elements exceed {limit}; this kernel keeps the row in registers\")"]
        lines += [f"    block_r = _pow2(n_red) if fits else {LOOP_BLOCK} if n_red >= {WIDE_LOOP_ROW} else 1024"]
    lines += ["    num_warps = min(16, max(1, block_r // 512)) if fits else "
              f"({LOOP_WARPS_LONG} if n_red >= {WIDE_LOOP_ROW} else 4)"]
    lines += [f"    if not fits and n_red >= {WIDE_LOOP_ROW}:   # long rows: the launch configuration CONFIGS[0] names",
              "        block_r = min(CONFIGS[0].kwargs[\"BLOCK_R\"], _pow2(n_red))",
              "        num_warps = CONFIGS[0].num_warps"] if configs else []
    for j in dens:
        dims = g[region.nodes[j]].args["denom"]
        lines.append(f"    den{j} = float(" + " * ".join(f"domain[{d}]" for d in dims) + ")")
    call = ", ".join(C.call_values(g, w.loads, params) + outs + ["*domain"]
                     + [f"*_strides({p}, domain)" for p in tensors] + strides
                     + ["n_red"] + [f"den{j}" for j in dens])
    lines += ["    if n_rows > 0 and n_red > 0:",
              f"        {kname}[(n_rows,)]({call}, BLOCK_R=block_r, ROW_IN_REGISTERS=fits, num_warps=num_warps)",
              f"    return {', '.join(outs)}{',' if len(outs) == 1 else ''}"]
    return "\n".join(lines) + "\n"


def _as_run(w: _Writer, variant: str, looped_ok: bool) -> str:
    """The variant the kernel runs as at the traced size; its evidence must say so (it once
    credited row_in_registers with looped kernels, and that ranking then spread to other
    patterns)."""
    return "looped" if variant == "registers" and looped_ok and loops_at_traced_size(w.t, w.g, w.r) else variant


def _transformations(variant: str, graph: Graph, region: Region) -> list[str]:
    out = (["one_row_per_program"] if variant not in ("chunked", "coop") else []) + ["fp32_accumulation", "tree_reduction"]
    if any(graph[n].op == "scan" for n in region.nodes):
        out.append("block_scan")
    if any(is_elementwise(graph[n]) for n in region.nodes):
        out.append("elementwise_fusion")
    return out + [VARIANT_TRANSFORMATION[variant]]     # the one the graph's ranking reads back


def _doc(graph: Graph, region: Region, variant: str) -> str:
    lanes = sum(1 for n in region.loads if graph[n].shape == region.domain)
    outs_full = sum(1 for n in region.outputs if region.state["frames"][n] == C.LANE)
    if variant == "split":
        return (f"{region.describe(graph)}: rows split across programs along the reduced dims "
                f"{list(region.reduced)}; stage 1 writes one fp32 partial per chunk and reduction, stage 2 "
                "combines them and applies the row epilogue: one read of the operands, a few KB of partials.")
    return (f"{region.describe(graph)}: one program per row, reducing dims {list(region.reduced)} of a "
            f"rank-{len(region.domain)} domain ({variant}). Row in registers: {lanes} full-size read(s) and "
            f"{outs_full} full-size write(s) per element, the minimum; a longer row re-reads its operands once "
            f"per reduction pass instead of storing intermediates.")
