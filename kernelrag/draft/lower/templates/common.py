"""What the templates share: value frames, operand loads over a broadcast domain, launchers.

Every operand is handed to a kernel as a pointer plus one stride per domain dim,
taken from ``_strides(tensor, domain)`` (``tensor.expand(domain).stride()`` without the
view, see ``host.py``) in the launcher: a broadcast dim has stride 0, a permuted view its
own strides, so no operand is ever copied to match the domain. Sizes are read from the tensors at run time; the traced shapes only
plan the lowering.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import literal
from kernelrag.draft.lower.ir import BOOL, FLOAT, INDEX, Graph, fits  # noqa: F401 (fits: the templates call C.fits)

LANE, ROW, SQUEEZED = "lane", "row", "squeezed"


def aligned(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def shape_frame(shape: tuple[int, ...], domain: tuple[int, ...], reduced: tuple[int, ...]) -> str:
    """LANE when the value varies along a reduced dim, ROW when it is constant across them."""
    full = aligned(shape, len(domain))
    return ROW if all(full[d] == 1 for d in reduced) else LANE


def is_scalar(graph: Graph, nid: int) -> bool:
    """A number read in forward (``scalar`` node): a kernel argument passed by value, no pointer."""
    return graph[nid].op == "scalar"


def operand_arg(graph: Graph, k: int, nid: int, what: str) -> tuple[str, str]:
    """The kernel argument for load ``k``: ``in{k}`` (a number) or ``in{k}_ptr``, with its comment."""
    if is_scalar(graph, nid):
        return f"in{k}", f"operand {k} ({graph[nid].args['code']}), a number passed by value"
    return f"in{k}_ptr", what


def tensor_params(graph: Graph, loads: list[int], params: list[str]) -> list[str]:
    return [p for nid, p in zip(loads, params) if not is_scalar(graph, nid)]


def call_values(graph: Graph, loads: list[int], params: list[str]) -> list[str]:
    """What a launcher hands the kernel per load: the tensor, or the number as a Python float / int."""
    return [p if not is_scalar(graph, nid) else (f"int({p})" if graph[nid].kind == INDEX else f"float({p})")
            for nid, p in zip(loads, params)]


def const_names(graph: Graph, ids) -> dict[int, str]:
    return {i: literal(graph[i].args["value"]) for i in ids if graph[i].op == "const"}


def load_expr(kind: str, pointer: str, mask: str | None, evict: str | None = None) -> str:
    """A load converted to the frame's kind; ``evict``: an L2 eviction policy ("evict_last")."""
    masked = f", mask={mask}, other=0" if mask else ""
    hint = f", eviction_policy=\"{evict}\"" if evict else ""
    raw = f"tl.load({pointer}{masked}{hint})"
    if kind == FLOAT:
        return f"{raw}.to(tl.float32)"
    if kind == BOOL:
        return f"({raw} != 0)"
    return raw


def dtype_code(kind: str, float_ref: str) -> str:
    return {INDEX: "torch.int64", BOOL: "torch.bool"}.get(kind, f"{float_ref}.dtype")


def store_value(value: str, kind: str, pointer: str) -> str:
    return f"{value}.to({pointer}.dtype.element_ty)" if kind != BOOL else f"{value}.to(tl.int1)"


def arg_lines(args: list[tuple[str, str]]) -> str:
    width = max(len(a) for a, _ in args) + 2
    return "".join(f"    {(a + ','):<{width}}# {c}\n" for a, c in args)


def launcher_head(name: str, params: list[str], doc: str) -> list[str]:
    return [f"def {name}({', '.join(params)}):", f'    """{doc}"""']


def float_ref(graph: Graph, loads: list[int], params: list[str]) -> str:
    """A floating tensor operand whose dtype the outputs take (numbers are not tensors)."""
    tensors = [(nid, p) for nid, p in zip(loads, params) if not is_scalar(graph, nid)]
    for nid, p in tensors:
        if graph[nid].kind == FLOAT:
            return p
    return tensors[0][1] if tensors else "None"


def domain_lines(params: list[str], rank: int, indent: str = "    ") -> list[str]:
    shapes = ", ".join(f"{p}.shape" for p in params)
    return [f"{indent}domain = _broadcast({shapes})",
            f"{indent}if len(domain) != {rank}:",
            f"{indent}    raise ValueError(f\"operands broadcast to {{tuple(domain)}}, expected rank {rank}\")"]
