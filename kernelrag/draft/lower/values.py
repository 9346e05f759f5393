"""Values shared by the decomposition modules: IR handles, the pending flip, argument helpers."""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower.ir import BOOL, FLOAT, INDEX


def kind_of_dtype(dtype: Any) -> str:
    text = str(dtype)
    if text == "torch.bool":
        return BOOL
    if text.startswith(("torch.int", "torch.uint", "torch.long")):
        return INDEX
    return FLOAT


class Unsupported(Exception):
    """The task uses something no template can place (the message names it)."""


class _Flip:
    """A flip along one dim, pending: lowered only as the direction of a scan along that dim."""

    def __init__(self, value: int, dim: int, scanned: bool = False):
        self.value, self.dim, self.scanned = value, dim, scanned


def _dims(dim: Any, rank: int) -> tuple[int, ...]:
    if dim is None or dim == [] or dim == ():
        return tuple(range(rank))
    if isinstance(dim, (list, tuple)):
        return tuple(sorted({int(d) % max(rank, 1) for d in dim}))
    return (int(dim) % max(rank, 1),)


def _arg(args: list, kwargs: dict, pos: int, key: str, default: Any = None) -> Any:
    if key in kwargs:
        return kwargs[key]
    return args[pos] if len(args) > pos else default


class IrRef:
    """A handle on an IR node id (so that ints in fx arguments stay numbers)."""

    __slots__ = ("id",)

    def __init__(self, nid: int):
        self.id = nid

    def __repr__(self) -> str:
        return f"%{self.id}"
