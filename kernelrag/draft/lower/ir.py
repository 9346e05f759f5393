"""The lowering IR: a task's forward as a flat list of primitive nodes.

A ``Node`` is one primitive with its canonical op, the ids of its inputs, constant
arguments, its traced (meta) shape and a value kind. The primitives are few on
purpose, so that every template can say exactly which of them it places:

  input      a forward argument                      args: name, index
  param      a parameter or buffer of the model      args: path ("ln.weight")
  const      a Python number                         args: value; shape ()
  scalar     a number read in forward at run time    args: code ("self.scale", "s", "({0} * 2.0)"); shape ();
             (a float attribute, a number argument)  kernels take it by value, never as a literal
  <ew op>    an elementwise op (``exprs.OPS``)       args: keyword arguments of the op
  reduce     sum/mean/max/min/prod/argmax/argmin     args: fn, dims (non-negative), keepdim
  scan       cumsum/cumprod along one dim            args: fn, dim, reverse
  cat        torch.cat / torch.stack of its inputs   args: dim (of the result), stack (True: each input
                                                     is one index of a new dim ``dim``)
  view       a layout change done in PyTorch         args: code ("{0}.view({0}.shape[0], 8, -1)")
             (slices, chunk, split and narrow too: a view of a tensor is a pointer with an offset and
             strides, which kernels read as they read any operand, never a copy)
  torch      an op no template places, left a PyTorch call (partial lowering only, a draft for the LLM)
                                                     args: code ("torch.sort({0}, dim=1)[0]")
  matmul ... ops placed by other families' templates (GEMM, conv, pooling) with their own args

High-level ops (softmax, layer norm, losses...) are decomposed into these by
``build``; shapes are the traced ones and only plan the lowering: every size a
kernel needs is read from the tensors at run time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FLOAT, INDEX, BOOL = "float", "index", "bool"    # value kinds: fp compute, int64 indices, masks
SOURCES = ("input", "param", "const")


@dataclass
class Node:
    id: int
    op: str
    inputs: list[int] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] = ()
    kind: str = FLOAT
    origin: str = ""          # the task's op this node came from ("layer_norm", "mean"...)

    @property
    def is_source(self) -> bool:
        return self.op in SOURCES

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.args.items() if k not in ("code", "path", "name"))
        return f"%{self.id}={self.op}({','.join(f'%{i}' for i in self.inputs)}{';' + extra if extra else ''})"


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)     # forward() parameters, in order
    out_dtypes: list[str] = field(default_factory=list)      # torch dtype of each output ("torch.float32")
    unplaced: list[str] = field(default_factory=list)        # ops left in PyTorch (partial lowering), with why

    def add(self, op: str, inputs: list[int] | None = None, shape: tuple[int, ...] = (), kind: str = FLOAT,
            origin: str = "", **args: Any) -> int:
        node = Node(len(self.nodes), op, list(inputs or []), dict(args), tuple(shape), kind, origin)
        self.nodes.append(node)
        return node.id

    def __getitem__(self, nid: int) -> Node:
        return self.nodes[nid]

    def users(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                found[i].append(n.id)
        return found

    def live(self) -> list[Node]:
        """Nodes the outputs depend on, in order (dead decomposition parts dropped)."""
        needed: set[int] = set()
        stack = list(self.outputs)
        while stack:
            nid = stack.pop()
            if nid not in needed:
                needed.add(nid)
                stack.extend(self.nodes[nid].inputs)
        return [n for n in self.nodes if n.id in needed]

    def dump(self) -> str:
        return "\n".join(n.label() for n in self.live()) + f"\nreturn {self.outputs}"


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of traced shapes (raises ValueError when they do not broadcast)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def fits(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    """True when ``shape`` broadcasts to ``domain`` without growing it."""
    try:
        return len(shape) <= len(domain) and broadcast(shape, domain) == tuple(domain)
    except ValueError:
        return False
