"""Row-wise template: reductions, norms, softmax, losses and scans, one row per program.

A *row* is one position in the kept dims of the region's domain; its elements are
the positions in the reduced dims (any dims, any strides: lane ``r`` is decomposed
into per-dim indices, so a reduction over dim 0 of a (N, C, H, W) tensor, batch
norm's statistics, needs no transpose). The kernel is the fused region:

  prologue   elementwise ops on the operands, computed per lane before a reduction
             (``(p - t) ** 2`` before MSE's mean, ``x * scale`` before softmax's max);
  reductions sum/mean/max/min/prod/argmax/argmin over the row, masked lanes set to
             the identity of the combine (0, -inf, +inf, 1);
  epilogue   elementwise ops mixing row scalars and lanes (``(x - mu) * rstd * w + b``,
             ``exp(x - m) / s``) and scans (``tl.cumsum`` / ``tl.cumprod``, reverse by
             walking the row from its end), stored once.

Two code paths, one constexpr: with ROW_IN_REGISTERS the row is one block, read once
(``2 * numel * element_size`` bytes for a norm: the minimum); otherwise every
reduction is a pass over the row in BLOCK_R chunks that recomputes its prologue from
the operands (recompute over store: a re-read, usually from L2, costs less than
writing and reading an intermediate), and a last pass writes the outputs; scans carry
the running total across chunks. FLOPs are those of the chain per element; the
kernel is memory-bound whenever the chain is shorter than ~50 ops per element.

Variants: ``registers`` (the row in registers when it fits: 8192 elements, and up to 16384
while its row operands' values fit 96 registers a thread at 16 warps, see ``row_limit``;
passes otherwise), ``looped`` (passes always, BLOCK_R = 1024, or 2048 at 16 warps for rows of
8192 or more, so the rows in flight stay in L2 for the re-read: a bounded register
budget), ``split`` (few long rows: two stages, see ``rowwise_split``; the default when
rows are fewer than 128 and longer than 64K elements at the traced size) and ``column``
(the innermost dim kept: programs own tiles of it and walk the reduced dims, see
``rowwise_column``; the default when that dim has 16 or more positions) and ``chunked`` (few
long rows ending in a full-size output, a group norm's: partial statistics over rows x chunks
programs, a combine per row, then the output pass chunk by chunk, see ``rowwise_chunked``; the
default, and the row variants dominated, when at most 1024 rows of 64K elements or more would
loop at the traced size) and ``three_pass`` (the looped passes without riders: a softmax's max,
sum and output each a pass, the earlier ones loading ``evict_last`` and the last
``evict_first``, as torch.compile's softmax over rows of 32768 does, whose re-reads all hit
L2 where the two-pass online kernel's did not; offered where rows loop at the traced size and
a reduction rides another's pass) and ``coop`` (rows of 32768 or more, and few long rows: a
row's chunks held in registers on consecutive programs of one launch, meeting at the row's
counter, so the row is read once, see ``rowwise_coop``; the default there) and ``piped``
(many rows of 8192 to 16384 elements held in registers: one program an SM loops over rows,
the next ones copied ahead into shared memory by Triton's pipeliner, see ``rowwise_piped``;
the default there). ``dominated``
leaves out of a generate run's rounds the variants that cannot win at the traced size.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.ir import Graph, Node
from kernelrag.draft.lower.protocol import Emitted, Region, register
from kernelrag.draft.lower.templates import common as C
from kernelrag.draft.lower.templates.rowwise_chunked import chunked_unavailable, emit_chunked, is_chunked_worthwhile
from kernelrag.draft.lower.templates.rowwise_column import column_unavailable, emit_column, is_column_worthwhile
from kernelrag.draft.lower.templates.rowwise_coop import coop_unavailable, emit_coop, is_coop_worthwhile
from kernelrag.draft.lower.templates.rowwise_emit import _Writer, emit_rowwise
from kernelrag.draft.lower.templates.rowwise_passes import cone, plan_passes
from kernelrag.draft.lower.templates.rowwise_piped import emit_piped, is_piped_worthwhile, piped_unavailable
from kernelrag.draft.lower.templates.rowwise_sizes import loops_at_traced_size, row_limit
from kernelrag.draft.lower.templates.rowwise_split import (emit_split, emit_split_region, few_long_rows_code,
                                                             is_split_worthwhile, split_unavailable)

class RowwiseTemplate:
    name = "rowwise"
    family = "reduction"
    variants = ("registers", "looped", "split", "column", "chunked", "three_pass", "coop", "piped")

    # ------------------------------------------------------------------ placement
    def opens(self, graph: Graph, node: Node) -> bool:
        return node.op in ("reduce", "scan")

    def _frame(self, graph: Graph, region: Region, nid: int) -> str | None:
        frames = region.state["frames"]
        if nid in frames:
            return frames[nid]
        node = graph[nid]
        if node.op in ("const", "scalar"):     # a number fits every frame
            return None
        if node.op == "iota":
            return C.LANE if node.args["dim"] in region.reduced and node.shape == region.domain else "bad"
        if not C.fits(node.shape, region.domain):
            return "bad"
        return C.shape_frame(node.shape, region.domain, region.reduced)

    def absorbs(self, graph: Graph, region: Region, node: Node) -> bool:
        if not region.nodes and "frames" not in region.state:
            if node.op not in ("reduce", "scan"):
                return False
            region.domain = graph[node.inputs[0]].shape
            region.reduced = tuple(node.args["dims"]) if node.op == "reduce" else (node.args["dim"],)
            region.state.update(frames={}, reverse=False, scans=0, argreduce=False)
        frame = self._place(graph, region, node)
        if frame is None:
            return False
        region.state["frames"][node.id] = frame
        return True

    def _place(self, graph: Graph, region: Region, node: Node) -> str | None:
        st, dom, red = region.state, region.domain, region.reduced
        ins = [self._frame(graph, region, i) for i in node.inputs]
        if "bad" in ins:
            return None
        if node.op == "iota":
            frame = self._frame(graph, region, node.id)
            return frame if frame == C.LANE else None
        if is_elementwise(node):
            seen = {f for f in ins if f is not None}
            if C.SQUEEZED in seen:
                return C.SQUEEZED if seen == {C.SQUEEZED} else None
            if not C.fits(node.shape, dom):
                return None
            return C.LANE if C.LANE in seen else C.ROW
        if node.op == "reduce":
            if tuple(node.args["dims"]) != red or ins[0] != C.LANE or graph[node.inputs[0]].shape != dom:
                return None
            if node.args["fn"] in ("argmax", "argmin"):
                if st["reverse"]:
                    return None
                st["argreduce"] = True
            return C.ROW
        if node.op == "squeeze_row":
            return C.SQUEEZED if ins[0] == C.ROW and tuple(node.args["dims"]) == red else None
        if node.op == "scan":
            if (node.args["dim"],) != red or ins[0] != C.LANE or graph[node.inputs[0]].shape != dom:
                return None
            reverse = bool(node.args["reverse"])
            if st["scans"] and st["reverse"] != reverse or (reverse and st["argreduce"]):
                return None
            st["scans"] += 1
            st["reverse"] = reverse
            return C.LANE
        return None

    def row_partial(self, graph: Graph, region: Region, node: Node) -> int | None:
        """A total over the row's dims and more (a loss's sum over the batch) of this region's lanes:
        the row's share joins the region as a per-row partial (a new node, returned) and the total
        then reduces the partials, so the full-size lane value is never written and read back
        (8192 x 32768 fp32: 2 GiB of traffic saved, 0.4 ms at the H200's 4.8 TB/s)."""
        if node.op != "reduce" or node.args["fn"] not in ("sum", "max", "min") or region.state.get("scans"):
            return None
        red, x = set(region.reduced), node.inputs[0]
        if not set(node.args["dims"]) > red or region.state["frames"].get(x) != C.LANE \
                or graph[x].shape != region.domain or any(d in red for d in node.args.get("denom") or ()):
            return None
        shape = tuple(1 if d in red else n for d, n in enumerate(region.domain))
        part = graph.add("reduce", [x], shape, origin=node.origin, fn=node.args["fn"], dims=tuple(sorted(red)),
                         keepdim=True)
        node.inputs = [part]
        region.state["frames"][part] = C.ROW
        return part

    def adopts(self, graph: Graph, region: Region, node: Node) -> bool:
        if region.template.family != "elementwise" or node.op not in ("reduce", "scan"):
            return False
        if graph[node.inputs[0]].shape != region.domain:
            return False
        trial = self.replayed(graph, node, region.nodes + [node.id])
        if trial is None:
            return False
        region.template, region.domain, region.reduced, region.state = self, trial.domain, trial.reduced, trial.state
        return True

    def replayed(self, graph: Graph, opener: Node, nodes: list[int]) -> Region | None:
        """A row-wise region holding ``nodes`` (in order) whose frame ``opener`` (a reduction or
        scan among them) sets, or None where one of them does not fit it: a pointwise region
        adopted as a reduction's prologue, or a GEMM's row chain placed after its product."""
        trial = Region(template=self)
        if not self.absorbs(graph, trial, opener):
            return None
        trial.state["frames"].pop(opener.id)
        trial.state.update(scans=0, argreduce=False, reverse=False)
        for nid in nodes:
            if not self.absorbs(graph, trial, graph[nid]):
                return None
        trial.nodes = list(nodes)
        return trial

    def unavailable(self, graph: Graph, region: Region, variant: str) -> str | None:
        if variant not in self.variants:
            return f"rowwise has no variant {variant!r} ({', '.join(self.variants)})"
        if variant in ("looped", "three_pass") and self._scan_feeds_reduction(graph, region):
            return "a scan feeds a reduction in the same row: only the row-in-registers path computes it"
        if variant == "three_pass" and not plan_passes(graph, region)[1]:
            return "no reduction rides another's pass (online softmax, shifted variance): the looped kernel"
        if variant == "split":
            return split_unavailable(graph, region)
        if variant == "column":
            return column_unavailable(graph, region)
        if variant == "chunked":
            return chunked_unavailable(graph, region)
        if variant == "coop":
            return coop_unavailable(graph, region)
        if variant == "piped":
            return piped_unavailable(self, graph, region)
        return None

    def dominated(self, graph: Graph, region: Region, variant: str) -> str | None:
        """Why ``variant`` is not worth a round here, or None. With the innermost dim kept (the
        ``column`` rule), a row variant's lanes stride by that dim: every 4-byte lane costs a
        32-byte sector, and on the H200 (2026-12-02) the graph's evidence for row-in-registers
        elsewhere once ranked it first for mean_pool_linear, 6.9 ms against column's 1.1 ms."""
        if variant != "column" and self.unavailable(graph, region, "column") is None and is_column_worthwhile(region):
            return "the innermost dim is kept: row lanes would stride by it (the column variant coalesces)"
        if variant == "chunked" and not is_chunked_worthwhile(region):
            return "rows enough to fill the GPU one program each: chunks add a read and two launches"
        if variant == "three_pass" and not loops_at_traced_size(self, graph, region):
            return "rows short enough to hold in registers are read once"
        if variant == "coop" and not is_coop_worthwhile(region):
            return "rows short enough for one program each are read once by it"
        if variant == "piped" and not is_piped_worthwhile(region):
            return "few or short rows: a program a row keeps enough rows in flight"
        if variant in ("registers", "looped", "three_pass") and self._chunks(graph, region) \
                and loops_at_traced_size(self, graph, region):
            # one looped program per row in two waves or fewer: group_norm's 512 rows of 2 MB ran at
            # 67% of the memory speed of light on the H200 (2026-12-02), 0.69x torch.compile
            return "few long rows loop in one program each, about two waves: the chunked variant fills the GPU"
        if variant == "looped" and loops_at_traced_size(self, graph, region):
            # the same kernel as ``registers`` at this size, whose rows are too long to hold: a
            # round spent on it re-times the same code (conv3d_group_norm_silu's second round on
            # the H200, 2026-12-02, instead of its channels_last convolution)
            return f"rows of more than {row_limit(self, graph, region)} elements loop in the registers variant too"
        return None

    def default_variant(self, graph: Graph, region: Region) -> str:
        """``column`` when the reduced dims leave the innermost dim kept (lanes along it coalesce; the
        row kernel's lanes would stride by it), ``split`` for few long rows (a loss over a whole
        tensor), else the row in registers."""
        if self.unavailable(graph, region, "column") is None and is_column_worthwhile(region):
            return "column"
        if self.unavailable(graph, region, "split") is None and is_split_worthwhile(graph, region):
            return "split"
        if self.unavailable(graph, region, "coop") is None and is_coop_worthwhile(region):
            return "coop"
        if self._chunks(graph, region) and loops_at_traced_size(self, graph, region):
            return "chunked"
        if self.unavailable(graph, region, "piped") is None and is_piped_worthwhile(region):
            return "piped"
        return self.variants[0]

    def _chunks(self, graph: Graph, region: Region) -> bool:
        return self.unavailable(graph, region, "chunked") is None and is_chunked_worthwhile(region)

    def _scan_feeds_reduction(self, graph: Graph, region: Region) -> bool:
        inside = set(region.nodes)
        for nid in region.nodes:
            if graph[nid].op == "reduce" and any(graph[c].op == "scan" for c in cone(graph, nid, inside)):
                return True
        return False

    # ------------------------------------------------------------------ emission
    def emit(self, graph: Graph, region: Region, variant: str, name: str) -> Emitted:
        """The variant's kernels; one program per row hands few long rows to the split at run time.

        The variant is picked at the traced size but the kernels serve any size: a graph-ranked
        ``registers`` draft of a whole-tensor sum once ran one program over 2**28 elements (one
        SM of 132, 139 ms for a 1 GiB read)."""
        if variant == "split":
            return emit_split_region(self, graph, region, name)
        if variant == "chunked":
            return emit_chunked(self, graph, region, name)
        if variant == "coop":
            return emit_coop(self, graph, region, name)
        if variant == "column":
            return emit_column(self, graph, region, name)
        if variant == "piped":
            return emit_piped(self, graph, region, name)
        if split_unavailable(graph, region) is not None:
            return emit_rowwise(self, graph, region, variant, name)
        split_kernels, split_launcher = emit_split(_Writer(self, graph, region, "split"), f"{name}_split")
        emitted = emit_rowwise(self, graph, region, variant, name, fallback=(few_long_rows_code(), f"{name}_split"))
        emitted.kernels += [k for k in split_kernels if k not in emitted.kernels]
        emitted.launcher = split_launcher + "\n\n" + emitted.launcher
        return emitted


ROWWISE = register(RowwiseTemplate(), priority=50)
