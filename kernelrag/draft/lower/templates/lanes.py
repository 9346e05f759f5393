"""An elementwise region's values at lane coordinates, with a frame per piece of a ``cat``.

Every lane of the domain has one index per dim (``i0``, ``i1``...): the *domain frame*.
A ``cat`` along dim ``d`` is a per-lane choice of piece: the lanes whose index along
``d`` lies in ``[o_p, o_p+1)`` take piece ``p`` at index ``i_d - o_p``. The piece is
computed in its own *frame* (those coordinates, and the lane mask narrowed to the
lanes that take it), so a lane loads only the operands of its own piece and the cat
costs no copy and no extra pass: ``torch.cat((-x2, x1), -1)`` is two masked loads and
a ``tl.where``. A ``stack`` is the same with pieces one index wide, the new dim
dropped from the piece's coordinates. The offsets ``o_p`` are sums of the pieces'
widths, computed by the launcher from the operands' shapes at run time.

Operands are read through one stride per dim of their own rank, 0 where their size is
1 (broadcast), aligned to the trailing coordinates of the frame they are read in.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import literal, node_expr
from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.templates import common as C


def leaves(graph: Graph, inside: set[int], roots: list[int]) -> list[int]:
    """The tensors and cats whose run-time shapes broadcast to the frame of ``roots``.

    The walk goes through the region's elementwise nodes and stops at operands read from
    outside (tensors; numbers have no shape) and at cats, whose shape the launcher builds
    from their pieces; an ``iota`` takes the frame's shape, so it names none."""
    found: list[int] = []
    seen: set[int] = set()
    stack = list(reversed(roots))
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        node = graph[nid]
        if nid not in inside:
            if node.op not in ("const", "scalar"):
                found.append(nid)
        elif node.op == "cat":
            found.append(nid)
        else:
            stack.extend(reversed(node.inputs))
    return found


def _live_users(graph: Graph) -> dict[int, list[int]]:
    ids = {n.id for n in graph.live()}
    return {n: [u for u in us if u in ids] for n, us in graph.users().items() if n in ids}


def piece_only(graph: Graph, users: dict[int, list[int]]) -> set[int]:
    """The nodes computed only as pieces of cats: every live user is a cat or such a node, and
    the task does not return them. They are computed where their cat selects them, never at the
    domain's own coordinates, so their shape (narrower along the cat dim) does not set the domain."""
    found: set[int] = set()
    for nid in sorted(users, reverse=True):     # users have larger ids: they are decided first
        if nid not in graph.outputs and users[nid] and all(graph[u].op == "cat" or u in found for u in users[nid]):
            found.add(nid)
    return found


def frame_shapes(graph: Graph, nodes: list[int]) -> list[tuple[int, ...]]:
    """The traced shapes the domain of a region of ``nodes`` broadcasts: each node's own, but for a
    piece-only node those of the cats it feeds (they join the region after it)."""
    users = _live_users(graph)
    bound = piece_only(graph, users)
    shapes, stack, seen = [], list(nodes), set()
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        if nid in bound:
            stack.extend(users[nid])
        else:
            shapes.append(graph[nid].shape)
    return shapes


class Lanes:
    """Kernel lines computing region values frame by frame; each (node, frame) is computed once."""

    def __init__(self, graph: Graph, loads: list[int], cats: list[int], rank: int, flat: bool = False,
                 offs: str = "offs"):
        self.g = graph
        self.rank = rank
        self.flat = flat         # operands may read at the flat lane index (``IN{k}_FLAT`` constexprs)
        self.offs = offs         # the flat lane index's name
        self.loads = {nid: k for k, nid in enumerate(loads)}
        self.cats = {nid: j for j, nid in enumerate(cats)}
        self.lines: list[str] = []
        self.frames: list[tuple[tuple[str, ...], str]] = [(tuple(f"i{d}" for d in range(rank)), "mask")]
        self.children: dict[tuple[int, int, int], int] = {}
        self.names: dict[tuple[int, int], str] = {}

    def value(self, nid: int, frame: int = 0) -> str:
        """The code name of node ``nid``'s value in ``frame``, emitting the lines that compute it."""
        node = self.g[nid]
        if node.op == "const":
            return literal(node.args["value"])
        if C.is_scalar(self.g, nid):
            return f"in{self.loads[nid]}"
        if (nid, frame) in self.names:
            return self.names[(nid, frame)]
        coords, mask = self.frames[frame]
        at = len(coords) - len(node.shape)       # the node's dims are the frame's trailing ones
        if node.op == "iota":
            return coords[at + node.args["dim"]]
        name = f"v{nid}" if frame == 0 else f"v{nid}_f{frame}"
        if nid in self.loads:
            k = self.loads[nid]
            off = " + ".join(f"{coords[at + d]} * in{k}_s{d}" for d in range(len(node.shape))) or "offs * 0"
            if self.flat and node.shape and len(coords) == self.rank:
                off = f"(({self._flat_offset(k, coords, at, len(node.shape))}) if IN{k}_FLAT else ({off}))"
            code = C.load_expr(node.kind, f"in{k}_ptr + {off}", mask, self._evict(node, frame))
        elif node.op == "cat":
            code = self._choice(nid, frame, coords[at + node.args["dim"]])
        else:
            code = node_expr(self.g, node, {i: self.value(i, frame) for i in node.inputs})
        self.lines.append(f"    {name} = {code}")
        self.names[(nid, frame)] = name
        return name

    def _evict(self, node, frame: int) -> str | None:
        """``evict_last`` for the loads whose lines another lane reads again: an operand broadcast
        over a domain dim (rotary embedding's cos and sin, read for every batch and head) and a
        cat piece's (the lanes of the other piece read the same rows), as torch.compile's
        pointwise kernels mark them. The L2 keeps them while the streamed operands pass through."""
        return "evict_last" if frame or len(node.shape) < self.rank or 1 in node.shape else None

    def _flat_offset(self, k: int, coords: tuple[str, ...], at: int, rank: int) -> str:
        """Operand k's offset when its strides are the contiguous ones of the domain's trailing
        ``rank`` dims: the flat lane index (modulo their size when it has fewer dims than the
        domain), moved along each dim where the frame reads a piece at its own index."""
        trailing = " * ".join(f"n{d}" for d in range(at, self.rank))
        base = self.offs if rank == self.rank else f"{self.offs} % ({trailing})"
        shift = "".join(f" + ({coords[at + d]} - i{at + d}) * in{k}_s{d}" for d in range(rank)
                        if coords[at + d] != f"i{at + d}")
        return base + shift

    def _choice(self, nid: int, frame: int, index: str) -> str:
        """``tl.where`` over the cat's pieces, each computed in its own frame."""
        node, j = self.g[nid], self.cats[nid]
        count = len(node.inputs)
        if node.args["stack"]:
            bounds = [str(p) for p in range(1, count)]
            picks = [f"{index} == {p}" for p in range(count)]
        else:
            bounds = [f"cat{j}_o{p}" for p in range(1, count)]
            picks = [f"{index} < {b}" for b in bounds] + [""]
        values = [self.value(piece, self._frame(frame, nid, p, index, bounds))
                  for p, piece in enumerate(node.inputs)]
        code = values[-1]
        for p in reversed(range(count - 1)):
            code = f"tl.where({picks[p]}, {values[p]}, {code})"
        return code

    def _frame(self, parent: int, nid: int, p: int, index: str, bounds: list[str]) -> int:
        """The frame of piece ``p`` of cat ``nid`` read in frame ``parent`` (made once)."""
        key = (parent, nid, p)
        if key in self.children:
            return self.children[key]
        coords, mask = self.frames[parent]
        node = self.g[nid]
        axis = len(coords) - len(node.shape) + node.args["dim"]
        f = len(self.frames)
        if node.args["stack"]:       # piece p is the lanes at index p; the new dim is not the piece's
            conds = [f"({index} == {p})"]
            coords = coords[:axis] + coords[axis + 1:]
        else:
            conds = ([f"({index} >= {bounds[p - 1]})"] if p else []) + \
                    ([f"({index} < {bounds[p]})"] if p < len(bounds) else [])
            if p:
                self.lines.append(f"    k{f} = {index} - {bounds[p - 1]}   # index in piece {p} of cat {nid}")
                coords = coords[:axis] + (f"k{f}",) + coords[axis + 1:]
        self.lines.append(f"    m{f} = {' & '.join([mask] + conds)}   # the lanes that read piece {p} of cat {nid}")
        self.frames.append((coords, f"m{f}"))
        self.children[key] = f
        return f


def shape_lines(graph: Graph, inside: set[int], cats: list[int], shape_of: dict[int, str]) -> list[str]:
    """Launcher lines giving each cat's run-time shape (``sh{id}``) and piece offsets (``o{id}``),
    checking that its pieces agree off the cat dim; ``shape_of`` maps an operand to its shape code."""
    lines: list[str] = []
    for nid in cats:            # region order: a cat inside a piece comes before the cat that reads it
        node = graph[nid]
        d, rank = node.args["dim"], len(node.shape)
        pieces = ", ".join(_broadcast_code([shape_of[i] for i in leaves(graph, inside, [p])]) for p in node.inputs)
        lines.append(f"    p{nid} = [{pieces}]   # the shapes of cat {nid}'s pieces")
        if node.args["stack"]:
            lines += [f"    if len(set(p{nid})) != 1 or len(p{nid}[0]) != {rank - 1}:",
                      f"        raise ValueError(f\"stack along dim {d} of pieces shaped {{p{nid}}}: they differ\")",
                      f"    sh{nid} = p{nid}[0][:{d}] + ({len(node.inputs)},) + p{nid}[0][{d}:]"]
            continue
        lines += [f"    if len({{s[:{d}] + s[{d + 1}:] for s in p{nid}}}) != 1 or len(p{nid}[0]) != {rank}:",
                  f"        raise ValueError(f\"cat along dim {d} of pieces shaped {{p{nid}}}: \"",
                  "                         \"the other dims differ\")",
                  f"    sh{nid} = p{nid}[0][:{d}] + (sum(s[{d}] for s in p{nid}),) + p{nid}[0][{d + 1}:]",
                  f"    o{nid} = [sum(s[{d}] for s in p{nid}[:p]) for p in range(1, {len(node.inputs)})]"
                  "   # where each later piece starts"]
    return lines


def _broadcast_code(shapes: list[str]) -> str:
    return f"tuple({shapes[0]})" if len(shapes) == 1 else f"_broadcast({', '.join(shapes)})"
