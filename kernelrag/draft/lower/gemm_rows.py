"""Reductions across a GEMM's N that no one tile spans: per-tile partials, then one combine.

A language-model head's loss, ``cross_entropy(h @ W.T, t)`` over a 32768-word vocabulary,
reduces rows far wider than a tile. Written as two kernels it stores the logits (8192 x 32768
bf16: 512 MB) and reads them back, about 0.2 ms of HBM traffic on an H200 beside a 1.6 ms
GEMM. Here each output tile reduces its own columns in the GEMM's epilogue to one fp32
partial per row and reduction, and a second kernel combines a row's partials and runs the
rest of the chain (the log, the target's logit, the ignore mask): the product is never
written, and the partials are a few values per row and tile.

What splits. A reduction over the last dim (sum, mean, max, min) of values computed from
the tile (the accumulator, its column index ``iota``, operands broadcast to the output) is
combined by the same reduction over the tiles' partials. A logsumexp, ``sum(exp(y - max(y)))``,
is the one reduction of a reduction's result that splits: each tile subtracts its own max
(``m_t``) and sums ``s_t``; the combine rescales, ``S = sum_t s_t * exp(m_t - M)`` with ``M =
max_t m_t`` (the online softmax's merge). Values per row (one per row, computed from
reductions and per-row operands such as the targets) run in the combine kernel. A chain
whose result is a full-size tensor (softmax itself) does not split: its rows go to the
row-wise template after the product is written.

``plan`` finds the nodes a GEMM region takes this way; ``tile_lines`` and ``combine_kernel``
write the two halves.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise, literal, node_expr
from kernelrag.draft.lower.ir import Graph, fits

FNS = ("sum", "mean", "max", "min")
_FILL = {"sum": "0.0", "mean": "0.0", "max": "float('-inf')", "min": "float('inf')"}
_OPERAND_KINDS = ("float", "index", "bool")


class _Walk:
    """The frames of the nodes taken so far: ``lane`` (one value per output element) or
    ``row``, and which lane values carry a tile's own max (only a logsumexp sum may read them)."""

    def __init__(self, graph: Graph, anchor: int):
        self.g, self.domain = graph, graph[anchor].shape
        self.row = self.domain[:-1] + (1,)
        self.squeezed = self.domain[:-1]   # a row value without its kept dim (logsumexp's result)
        self.frame = {anchor: "lane"}
        self.shifted: dict[int, int] = {}     # y - max(y) -> the max node; exp of it -> the max node

    def take(self, nid: int) -> bool:
        node, g, last = self.g[nid], self.g, len(self.domain) - 1
        inside = [i for i in node.inputs if i in self.frame]
        outside = [i for i in node.inputs if i not in self.frame]
        for i in outside:
            src = g[i]
            if src.op in ("const", "scalar"):
                continue
            if src.kind not in _OPERAND_KINDS or not fits(src.shape, self.domain):
                return False
        if node.op == "squeeze_row":
            ok = (self.frame.get(node.inputs[0]) == "row" and g[node.inputs[0]].shape == self.row
                  and tuple(node.args["dims"]) == (last,))
            return self._set(nid, "row") if ok else False
        if node.op == "iota":
            ok = node.shape == self.domain and node.args.get("dim") in (last, -1)
            return self._set(nid, "lane") if ok else False
        if node.op == "reduce":
            x = node.inputs[0]
            if (node.args["fn"] not in FNS or tuple(node.args["dims"]) != (last,) or node.shape != self.row
                    or self.frame.get(x) != "lane"):
                return False
            if x in self.shifted and not (node.args["fn"] == "sum" and g[x].op == "exp"):
                return False              # only sum(exp(y - max(y))) rescales across tiles
            return self._set(nid, "row")
        if not is_elementwise(node):
            return False
        if node.shape in (self.row, self.squeezed):   # a row value: from row values and per-row operands
            kept = node.shape == self.row                 # (a squeezed one: numbers only, no tensor operand)
            ok = all(self.frame[i] == "row" and g[i].shape == node.shape for i in inside) and all(
                g[i].op in ("const", "scalar") or kept and fits(g[i].shape, self.row) for i in outside)
            return self._set(nid, "row") if ok else False
        if node.shape != self.domain:
            return False
        rows = [i for i in inside if self.frame[i] == "row"]
        if rows:                          # y - max(y), with max a reduction of that very y
            if node.op != "sub" or len(node.inputs) != 2:
                return False
            y, m = node.inputs
            if not (rows == [m] and g[m].op == "reduce" and g[m].args["fn"] == "max" and g[m].inputs[0] == y
                    and self.frame.get(y) == "lane" and y not in self.shifted):
                return False
            self.shifted[nid] = m
            return self._set(nid, "lane")
        shifted = [i for i in inside if i in self.shifted]
        if shifted:
            if node.op != "exp" or g[shifted[0]].op != "sub":
                return False
            self.shifted[nid] = self.shifted[shifted[0]]
        return self._set(nid, "lane")

    def _set(self, nid: int, frame: str) -> bool:
        self.frame[nid] = frame
        return True


def _walked(graph: Graph, anchor: int, nodes: list[int]) -> _Walk:
    """The frames of a planned chain (``plan`` took every one of ``nodes``)."""
    walk = _Walk(graph, anchor)
    for nid in nodes:
        walk.take(nid)
    return walk


def plan(graph: Graph, anchor: int) -> list[int] | None:
    """The nodes after the ``matmul`` ``anchor`` that its GEMM region takes as split rows, in
    order (``squeeze_row`` nodes included), or None when the chain does not end in one
    value per row through at least one reduction the tile cannot span whole."""
    domain = graph[anchor].shape
    if len(domain) < 2 or domain[-1] <= 1:
        return None
    walk = _Walk(graph, anchor)
    taken: list[int] = []
    live = graph.live()
    for node in live[[n.id for n in live].index(anchor) + 1:]:
        if node.is_source:
            continue
        reads = any(i in walk.frame for i in node.inputs)
        if node.op in ("view", "scalar", "torch"):
            if reads:
                break
            continue                      # placed before the region
        if not walk.take(node.id):
            break
        taken.append(node.id)
    users, live_ids = graph.users(), {n.id for n in live}
    while taken:                          # the longest prefix whose only value leaving it is its last, a row
        inside = set(taken) | {anchor}
        leaving = [n for n in [anchor, *taken]
                   if n in graph.outputs or any(u not in inside for u in users[n] if u in live_ids)]
        last = taken[-1]
        if leaving == [last] and walk.frame[last] == "row":
            break
        taken.pop()
    if not any(graph[n].op == "reduce" for n in taken):
        return None
    return taken


def rescaled(graph: Graph, nodes: list[int], anchor: int) -> bool:
    """True when a logsumexp among ``nodes`` merges its tiles by their maxima."""
    return bool(_walked(graph, anchor, nodes).shifted)


def reduce_expr(fn: str, x: str) -> str:
    """``fn`` over the tile's columns of ``x`` (those past N masked by ``n_ok``), one value a row
    ([BLOCK_M, 1]); a mean's division is the caller's (by N, or by nothing for a partial)."""
    op = "sum" if fn in ("sum", "mean") else fn
    return f"tl.{op}(tl.where(n_ok[None, :], {x}, {_FILL[fn]}), axis=1)[:, None]"


def reductions(graph: Graph, nodes: list[int]) -> list[int]:
    """The reduce nodes among ``nodes``, in order: partial j of a tile is reduction j's."""
    return [n for n in nodes if graph[n].op == "reduce"]


def _names(graph: Graph, nodes: list[int], anchor: int, extras: list[int], scalars: tuple[int, ...]) -> dict:
    names = {anchor: "acc"}
    names.update({nid: f"e{k}" for k, nid in enumerate(extras)})
    names.update({nid: f"s{k}" for k, nid in enumerate(scalars)})
    for nid in nodes:
        for i in graph[nid].inputs:
            if graph[i].op == "const":
                names.setdefault(i, literal(graph[i].args["value"]))
    return names


def tile_lines(graph: Graph, nodes: list[int], anchor: int, extras: list[int], scalars: tuple[int, ...]) -> str:
    """Epilogue lines of one output tile: partial ``p<j>`` ([BLOCK_M, 1], fp32) of every
    reduction, each right after the lane values only it still needs, so a tile of values (a
    cross-entropy's target mask) is not held across another reduction: the accumulator's 128
    values a thread at a 128 x 256 tile on 8 warps leave room for one more tile, not two. A
    logsumexp's shift is the tile's own max (``r<j>``: 0 where the tile's row is all -inf, so
    no -inf - -inf)."""
    walk = _walked(graph, anchor, nodes)
    names = _names(graph, nodes, anchor, extras, scalars)
    part = {n: j for j, n in enumerate(reductions(graph, nodes))}
    lines: list[str] = []

    def lane(nid: int) -> None:           # nid and the lane values it reads, once, inputs first
        node = graph[nid]
        if nid in names or walk.frame.get(nid) != "lane":
            return
        for i in node.inputs:
            lane(i)
        if node.op == "iota":
            names[nid] = "offs_n[None, :]"
            return
        if nid in walk.shifted and node.op == "sub":
            expr = f"({names[node.inputs[0]]} - r{part[walk.shifted[nid]]})"
        else:
            expr = node_expr(graph, node, names)
        lines.append(f"v{nid} = {expr}")
        names[nid] = f"v{nid}"

    for nid, j in part.items():
        lane(graph[nid].inputs[0])
        lines.append(f"p{j} = {reduce_expr(graph[nid].args['fn'], names[graph[nid].inputs[0]])}")
        if graph[nid].args["fn"] == "max":
            lines.append(f"r{j} = tl.where(p{j} == float('-inf'), 0.0, p{j})")
    return "".join(line + "\n" for line in lines)


def combine_kernel(graph: Graph, nodes: list[int], anchor: int, extras: list[int], extra_rows: tuple[bool, ...],
                   extra_ints: tuple[bool, ...], scalars: tuple[int, ...], name: str) -> str:
    """``<name>_rows_kernel``: BLOCK_R rows a program, each row's NT partials of every reduction
    combined (a logsumexp's sums rescaled to the row's max), then the row values of the chain and
    the one store of its last."""
    walk = _walked(graph, anchor, nodes)
    names = _names(graph, nodes, anchor, extras, scalars)
    reds = reductions(graph, nodes)
    args = ["    ws_ptr,  # fp32 partials [NP, R, NT]: per row and output tile, one value of each reduction\n",
            "    out_ptr,  # the chain's result, one value per row [R]\n"]
    args += [f"    e{k}_ptr,  # operand {k} of the chain, read here when it is one value per row\n"
             for k in range(len(extras))]
    args += [f"    s{k},  # number {k}, by value\n" for k in range(len(scalars))]
    args += ["    R, M, B1, N, NT,  # rows (B0 * B1 * M), rows of one product, inner batch, columns, tiles a row\n"]
    args += [f"    s_e{k}_0, s_e{k}_1, s_e{k}_m, s_e{k}_n,  # element strides of e{k}\n" for k in range(len(extras))]
    args += ["    BLOCK_R: tl.constexpr,  # rows a program\n",
             "    BLOCK_T: tl.constexpr,  # NT rounded up to a power of two\n"]
    body = ["rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
            "r_ok = rows < R",
            "batch = rows // M",
            "m = (rows % M)[:, None]",
            "b0 = (batch // B1).to(tl.int64)[:, None]",
            "b1 = (batch % B1).to(tl.int64)[:, None]",
            "tiles = tl.arange(0, BLOCK_T)",
            "ok = r_ok[:, None] & (tiles < NT)[None, :]",
            "ws = ws_ptr + rows[:, None].to(tl.int64) * NT + tiles[None, :]"]
    for k, row in enumerate(extra_rows):
        if row:
            cast = "" if extra_ints[k] else ".to(tl.float32)"
            body.append(f"e{k} = tl.load(e{k}_ptr + b0 * s_e{k}_0 + b1 * s_e{k}_1 + m * s_e{k}_m, "
                        f"mask=r_ok[:, None], other=0){cast}")
    for j, nid in enumerate(reds):
        fn = graph[nid].args["fn"]
        at = f"ws + {j} * tl.cast(R, tl.int64) * NT" if j else "ws"
        body.append(f"q{j} = tl.load({at}, mask=ok, other={_FILL[fn]})")
    for nid in nodes:
        node = graph[nid]
        if node.op == "squeeze_row":
            names[nid] = names[node.inputs[0]]
            continue
        if walk.frame[nid] != "row":
            continue
        if node.op == "reduce":
            j, fn = reds.index(nid), node.args["fn"]
            x = node.inputs[0]
            if x in walk.shifted:         # sum_t s_t * exp(m_t - M): each tile's sum at the row's max
                a = reds.index(walk.shifted[x])
                body.append(f"shift{j} = tl.where(v{reds[a]} == float('-inf'), 0.0, v{reds[a]})")
                expr = f"tl.sum(q{j} * tl.exp(q{a} - shift{j}), axis=1)[:, None]"
            else:
                op = "sum" if fn in ("sum", "mean") else fn
                expr = f"tl.{op}(q{j}, axis=1)[:, None]" + (" / N" if fn == "mean" else "")
        else:
            expr = node_expr(graph, node, names)
        body.append(f"v{nid} = {expr}")
        names[nid] = f"v{nid}"
    result = names[nodes[-1]]
    body.append(f"tl.store(out_ptr + rows, tl.reshape({result}, (BLOCK_R,)).to(out_ptr.dtype.element_ty), mask=r_ok)")
    return (f"@triton.jit\ndef {name}_rows_kernel(\n" + "".join(args) + "):\n"
            + "".join(f"    {line}\n" for line in body))


STORE_PARTIALS = '''{i}# the tile's partials, one a row and reduction: [NP, R, NT] fp32, this tile's column pid_n
{i}ws = c_ptr + ({first}offs_m).to(tl.int64) * num_pid_n + pid_n
{stores}'''


def store_text(n_partials: int, indent: str, first: str, rows: str) -> str:
    """The tile's stores of ``p0..`` in place of the output tile's; ``first`` is the tile's first
    row among all R (a batch entry's offset, written ``<expr> + ``; empty for one product), ``rows`` R itself."""
    at = ["ws"] + [f"ws + {j} * tl.cast({rows}, tl.int64) * num_pid_n" for j in range(1, n_partials)]
    stores = "".join(f"{indent}tl.store({at[j]}, tl.reshape(p{j}, (BLOCK_M,)), mask=m_ok)\n" for j in range(n_partials))
    return STORE_PARTIALS.format(i=indent, first=first, stores=stores)
