"""Channelwise template: an elementwise chain over [N, C, *spatial] whose other operands are per channel.

Technique. An inference batch norm (and any per-channel affine, scale or bias on an
NCHW activation) reads one full tensor and a few [C] vectors. The elementwise
template would decompose every flat index into (n, c, h, w) and load each [C] vector
once per element through stride-0 dims. Here one program owns BLOCK elements of one
(n, c) plane: the per-channel operands are loaded once per program as scalars and
everything computed from them alone (a batch norm's rsqrt(running_var + eps) and the
affine's scale) is computed once per program, not per element; the plane is streamed
with contiguous (vectorizable) loads and stores. Bytes: (planes read + written) *
numel * element size, plus C * (per-channel operands) * element size, so the kernel
runs at copy bandwidth.

Placement. The template opens only when the whole run of elementwise nodes that the
elementwise template would take fits it: every value is a full plane tensor (the
domain's shape), per channel ([C, 1, ..] or [1, C, 1, ..]) or a scalar, at least one
operand is per channel, the domain has a channel dim and a spatial extent (rank >= 3),
and only full planes leave the region. Otherwise the elementwise template takes the
run. Its family is ``elementwise``, so a reduction over the domain still adopts it as
a prologue (``rowwise``).

Launch. The block of a plane a program streams, and its warps, come from the module's
``CONFIGS`` (``CHANNELWISE_CONFIGS``, the first launched): on a GPU the configuration
search verifies the others, pins the fastest and records each as graph evidence. A module
holds one ``CONFIGS`` list; where a row-wise region brings its own, that one is kept
(``protocol.YIELDING_CONFIGS``) and this launcher takes its first row of the table.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise, node_expr
from kernelrag.draft.lower.ir import FLOAT, Graph, Node
from kernelrag.draft.lower.protocol import YIELDING_CONFIGS, Emitted, Region, register
from kernelrag.draft.lower.templates import common as C

# (plane elements a program, warps), the first launched. 4096 at 8 warps, the only choice until
# 2026-12-07: batch_norm_eval_relu at 93% of the copy ceiling on an H100 (1.14x torch.compile,
# bench/results/h100-2026-12-07-s7.json), 75% on an H200 where torch.compile reached 87%
# (h200-2026-12-07-s7.json). The others are for the search to time: 1024 at 4 warps is what
# the elementwise template launches, whose drafts reached 91-99% of the H200's ceiling that day.
CHANNELWISE_CONFIGS = ((4096, 8), (1024, 4), (2048, 4), (2048, 8), (8192, 16))


def configs_source() -> str:
    """The module-level ``CONFIGS`` list of a channelwise draft."""
    rows = "".join(f"    triton.Config({{\"BLOCK\": {b}}}, num_warps={w}),\n" for b, w in CHANNELWISE_CONFIGS)
    return (f"{YIELDING_CONFIGS}\n# The channelwise kernel launches CONFIGS[0]; on a GPU the configuration search\n"
            "# verifies the others and pins the fastest.\nCONFIGS = [\n" + rows + "]\n")


def per_channel(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    """True when ``shape`` is constant over every dim of ``domain`` but the channel dim (1)."""
    if len(shape) > len(domain):
        return False
    full = C.aligned(shape, len(domain))
    return all(full[d] == 1 for d in range(len(domain)) if d != 1) and full[1] in (1, domain[1])


def _run(graph: Graph, start: Node) -> list[int] | None:
    """The ids the elementwise template would place with ``start`` when all of them fit here, else None."""
    domain = start.shape
    if len(domain) < 3 or start.kind != FLOAT:
        return None
    live = graph.live()
    users = graph.users()
    live_ids = {n.id for n in live}
    run: list[int] = []
    channel_operand = False
    for node in live[[n.id for n in live].index(start.id):]:
        if node.is_source:
            continue
        if node.op in ("view", "squeeze_row") or not is_elementwise(node):
            if node.op == "view" and not any(i in run for i in node.inputs):
                continue                    # a view of a ready tensor goes before the region
            break
        if node.kind != FLOAT or not (node.shape == domain or per_channel(node.shape, domain)):
            return None
        for i in node.inputs:
            src = graph[i]
            if i in run or src.op == "const":
                continue
            if src.kind != FLOAT or not (src.shape == domain or per_channel(src.shape, domain)):
                return None
            channel_operand = channel_operand or src.shape != domain
        run.append(node.id)
    inside = set(run)
    for nid in run:
        leaves = nid in graph.outputs or any(u not in inside for u in users[nid] if u in live_ids)
        if leaves and graph[nid].shape != domain:
            return None                     # a per-channel value is not stored as a plane
    return run if channel_operand else None


class ChannelwiseTemplate:
    name = "channelwise"
    family = "elementwise"
    variants = ("per_channel",)

    def opens(self, graph: Graph, node: Node) -> bool:
        return is_elementwise(node) and node.shape and _run(graph, node) is not None

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not region.nodes:
            run = _run(graph, node) if is_elementwise(node) else None
            if run is None:
                return False
            region.domain = node.shape
            region.state["run"] = run
            return True
        return node.id in region.state["run"]

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        return False

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        if variant not in self.variants:
            return f"channelwise has no variant {variant!r} ({', '.join(self.variants)})"
        if any(graph[n].shape != region.domain for n in region.outputs):
            return "a per-channel value of the channelwise region is needed outside it"
        return None

    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        domain, loads, outs = region.domain, region.loads, region.outputs
        plane = [graph[i].shape == domain for i in loads]
        args = [(f"in{k}_ptr", f"operand {k} ({graph[n].origin or graph[n].op}), "
                 + ("a plane per (n, c)" if plane[k] else "one value per channel")) for k, n in enumerate(loads)]
        args += [(f"out{k}_ptr", f"output {k}, contiguous") for k in range(len(outs))]
        args += [("C, HW", "channels; elements of one (n, c) plane")]
        args += [(f"in{k}_sn, in{k}_sc" + (f", in{k}_sl" if plane[k] else ""),
                  f"operand {k}'s strides: batch, channel" + (", plane" if plane[k] else "")) for k in range(len(loads))]
        args += [("BLOCK: tl.constexpr", "plane elements per program")]
        body = ["    pid = tl.program_id(0)",
                "    nblk = tl.cdiv(HW, BLOCK)",
                "    row = pid // nblk  # the (n, c) plane",
                "    n = (row // C).to(tl.int64)",
                "    c = (row % C).to(tl.int64)",
                "    offs = (pid % nblk) * BLOCK + tl.arange(0, BLOCK)",
                "    mask = offs < HW   # the last block of a plane covers its tail"]
        names = C.const_names(graph, [i for n in region.nodes for i in graph[n].inputs])
        for k, nid in enumerate(loads):         # per-channel operands first: scalars, once per program
            if not plane[k]:
                body.append(f"    v{nid} = tl.load(in{k}_ptr + n * in{k}_sn + c * in{k}_sc).to(tl.float32)")
                names[nid] = f"v{nid}"
        for k, nid in enumerate(loads):
            if plane[k]:
                body.append(f"    v{nid} = tl.load(in{k}_ptr + n * in{k}_sn + c * in{k}_sc + offs.to(tl.int64) * "
                            f"in{k}_sl, mask=mask, other=0).to(tl.float32)")
                names[nid] = f"v{nid}"
        for nid in region.nodes:     # per-channel nodes are scalars: computed once per program
            body.append(f"    v{nid} = {node_expr(graph, graph[nid], names)}")
            names[nid] = f"v{nid}"
        for k, nid in enumerate(outs):
            body.append(f"    tl.store(out{k}_ptr + (n * C + c) * HW + offs, "
                        f"{C.store_value(names[nid], FLOAT, f'out{k}_ptr')}, mask=mask)")
        kname = f"{name}_kernel"
        kernel = f"@triton.jit\ndef {kname}(\n{C.arg_lines(args)}):\n" + "\n".join(body) + "\n"
        params = [f"a{k}" for k in range(len(loads))]
        ref = next(p for p, is_plane in zip(params, plane) if is_plane)
        rank = len(domain)
        lines = C.launcher_head(name, params, f"{region.describe(graph)}; one program per BLOCK elements of "
                                              "one (n, c) plane, per-channel values once per program.")
        lines += C.domain_lines(params, rank)
        lines += ["    Nb, Cc = domain[0], domain[1]",
                  "    HW = 1",
                  "    for s in domain[2:]:",
                  "        HW *= s"]
        strides = []
        for k, p in enumerate(params):
            if plane[k]:     # a view when the spatial dims are contiguous (nn layouts), else a copy
                lines.append(f"    {p} = {p}.flatten(2)")
                strides.append(f"*{p}.stride()")
            else:
                strides.append(f"*_strides({p}, domain)[:2]")
        out_names = [f"out{k}" for k in range(len(outs))]
        lines += [f"    out{k} = torch.empty(domain, dtype={ref}.dtype, device={ref}.device)" for k in range(len(outs))]
        lines += ["    own = \"BLOCK\" in CONFIGS[0].kwargs      # else the list is a row-wise region's: the table's first row",
                  f"    block, warps = (CONFIGS[0].kwargs[\"BLOCK\"], CONFIGS[0].num_warps) if own else {CHANNELWISE_CONFIGS[0]!r}",
                  "    cap = block if a0.is_cuda else 1024",
                  "    BLOCK = min(_pow2(max(HW, 1)), cap)   # a short plane: one block of it, on 4 warps",
                  "    if Nb * Cc * HW > 0:",
                  f"        {kname}[(Nb * Cc * _cdiv(HW, BLOCK),)](",
                  f"            {', '.join(params + out_names)}, Cc, HW, {', '.join(strides)},",
                  "            BLOCK=BLOCK, num_warps=warps if BLOCK == cap and a0.is_cuda else 4)",
                  f"    return {', '.join(out_names)}{',' if len(outs) == 1 else ''}"]
        doc = (f"{region.describe(graph)}: per (n, c) plane, {sum(plane)} plane read(s) and {len(outs)} write(s) "
               f"per element, {len(loads) - sum(plane)} per-channel operand(s) loaded once per program and the "
               "values computed from them alone hoisted out of the per-element work: memory-bound at copy rate.")
        return Emitted([configs_source(), kernel], "\n".join(lines) + "\n", name,
                       ["per_channel_hoisting", "vectorized_loads", "elementwise_fusion", "fp32_accumulation"], doc)


CHANNELWISE = register(ChannelwiseTemplate(), priority=85)
