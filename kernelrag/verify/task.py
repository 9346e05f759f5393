"""KernelBench task files: checking their shape, and shrinking their sizes for CPU checks.

A task is loaded unchanged. To check a kernel under Triton's interpreter in seconds, the
module-level integer constants that hold sizes (``batch_size = 4096``, ``M = 1024 * 2``,
``input_shape = (32768,)``; any case) are rewritten in the source to small values:

* only constants larger than ``threshold`` shrink, so axis indices, kernel sizes,
  strides and group counts stay as they are;
* equal originals map to equal sizes, and larger originals to larger sizes;
* a power of two stays a power of two, an odd size stays odd (4095 keeps a ragged
  tail), an even size keeps its factors of two up to min(16, unit / 2), a shrunk size stays a
  multiple of every small non-power-of-two constant that divided the original (a
  group count of 3), and of every smaller shrunk size that divided it;
* nothing shrinks below ``unit`` (at least 16).

Expressions over names (``head_dim = hidden // heads``) are left alone and follow.
Sizes written as literals inside ``get_inputs`` cannot be shrunk: they are reported,
and the task runs as it is if its tensors fit the budget.

Standard library only: the parent process rewrites, the worker processes execute.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

from kernelrag.errors import TaskError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class ShrinkLevel:
    threshold: int     # constants above this shrink
    unit: int          # smallest shrunk size, and the step between distinct sizes


@dataclass
class Variant:
    """One version of the task source to run, with the sizes it changed."""

    name: str                                   # "original", "small", "tail", ...
    source: str
    sizes: dict[str, list[int]] = field(default_factory=dict)   # name -> [original, new]

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "sizes": self.sizes}


# Ladders, tried in order until one runs and fits the element budget.
CPU_PRIMARY = (ShrinkLevel(64, 16), ShrinkLevel(32, 16), ShrinkLevel(16, 8), ShrinkLevel(16, 4))
CPU_SECOND = (ShrinkLevel(64, 24), ShrinkLevel(32, 24), ShrinkLevel(16, 12), ShrinkLevel(16, 6))
GPU_PRIMARY = (None, ShrinkLevel(16384, 8192), ShrinkLevel(4096, 2048), ShrinkLevel(1024, 512),
               ShrinkLevel(256, 128), ShrinkLevel(64, 32))    # None = original sizes; the last rung
                                                              # is for 4-D tasks whose every dim is <= 256
GPU_SECOND = (ShrinkLevel(64, 40),)


def check_task_source(source: str, path: str = "<task>") -> ast.Module:
    """Parse a task and confirm it has ``Model``, ``get_inputs`` and ``get_init_inputs``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TaskError(f"task {path} does not parse: {exc}; fix the file") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise TaskError(f"task {path} is not in KernelBench format: missing {', '.join(missing)} "
                        "(needs class Model(nn.Module), def get_inputs(), def get_init_inputs())")
    return tree


def size_constants(tree: ast.Module) -> dict[str, int | tuple[int, ...]]:
    """Module-level names bound to integer constant expressions (or tuples of them)."""
    env: dict[str, int | tuple[int, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _const_int(node.value)
            if value is not None:
                env[node.targets[0].id] = value
    return env


def literal_sizes_in_get_inputs(tree: ast.Module, threshold: int) -> list[int]:
    """Integer literals above ``threshold`` used inside ``get_inputs`` (sizes we cannot shrink)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            return sorted({n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                           and type(n.value) is int and n.value > threshold})
    return []


def shrink(source: str, level: ShrinkLevel, name: str, *, cpu: bool = False) -> Variant:
    """Rewrite the size constants of ``source`` for ``level`` (see the module docstring).

    With ``cpu``, tensors the task creates with ``device="cuda"`` or ``.cuda()`` are
    created on the CPU instead.
    """
    tree = check_task_source(source)
    if cpu:
        _retarget_cpu(tree)
    consts = size_constants(tree)
    scalars = {k: v for k, v in consts.items() if isinstance(v, int)}
    large = sorted({v for v in _all_ints(consts.values()) if v > level.threshold})
    small = sorted({v for v in scalars.values() if 1 < v <= level.threshold})
    mapping = _map_sizes(large, small, level.unit)
    sizes: dict[str, list[int]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in consts):
            continue
        key = node.targets[0].id
        value = consts[key]
        if isinstance(value, int) and value in mapping:
            node.value = ast.copy_location(ast.Constant(mapping[value]), node.value)
            sizes[key] = [value, mapping[value]]
        elif isinstance(value, tuple) and any(v in mapping for v in value):
            new = tuple(mapping.get(v, v) for v in value)
            node.value = ast.copy_location(ast.Tuple([ast.Constant(v) for v in new], ast.Load()), node.value)
            for i, (a, b) in enumerate(zip(value, new)):
                if a != b:
                    sizes[f"{key}[{i}]"] = [a, b]
    return Variant(name, ast.unparse(ast.fix_missing_locations(tree)) + "\n", sizes)


def variants(source: str, device: str) -> tuple[list[Variant], list[Variant]]:
    """The primary ladder and the second-shape ladder for ``device`` ("cpu" or "cuda")."""
    check_task_source(source)
    primary_levels, second_levels = (CPU_PRIMARY, CPU_SECOND) if device == "cpu" else (GPU_PRIMARY, GPU_SECOND)
    cpu = device == "cpu"
    primary = [Variant("original", source) if lv is None else shrink(source, lv, f"shrunk-{lv.unit}", cpu=cpu)
               for lv in primary_levels]
    second = [shrink(source, lv, f"shape2-{lv.unit}", cpu=cpu) for lv in second_levels]
    primary = [v for v in primary if v.name == "original" or v.sizes] or primary[:1]
    return _dedupe(primary), [v for v in _dedupe(second) if v.sizes]


def _dedupe(items: list[Variant]) -> list[Variant]:
    seen, out = set(), []
    for v in items:
        if v.source not in seen:
            seen.add(v.source)
            out.append(v)
    return out


# ----------------------------------------------------------------- internals
def _retarget_cpu(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "device" and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) and node.value.value.startswith("cuda"):
            node.value = ast.Constant("cpu")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda" \
                and not node.args and not node.keywords:
            node.func.attr = "cpu"


def _const_int(node: ast.AST) -> int | tuple[int, ...] | None:
    """Evaluate an integer constant expression without names (1024 * 2, 2 ** 12, (4096,))."""
    if isinstance(node, ast.Tuple):
        items = [_const_int(e) for e in node.elts]
        return tuple(items) if items and all(type(i) is int for i in items) else None
    value = _eval_int(node)
    return value if type(value) is int else None


def _eval_int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval_int(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp):
        a, b = _eval_int(node.left), _eval_int(node.right)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None,
               ast.Pow: lambda: a ** b if 0 <= b <= 64 else None,
               ast.LShift: lambda: a << b if 0 <= b <= 64 else None}
        fn = ops.get(type(node.op))
        return fn() if fn else None
    return None


def _all_ints(values) -> list[int]:
    out = []
    for v in values:
        out += list(v) if isinstance(v, tuple) else [v]
    return out


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _twos(v: int) -> int:
    return (v & -v) if v else 1


def _map_sizes(large: list[int], small: list[int], unit: int) -> dict[int, int]:
    """Map each large original size to a small one, keeping the relations in the docstring."""
    mapping: dict[int, int] = {}
    prev = 0
    for rank, v in enumerate(large):
        target = max(unit + (unit // 2) * rank, prev + 1)
        # powers of two among the small constants divide any power-of-two size >= them
        divisors = [c for c in small if v % c == 0 and not _is_pow2(c)]
        divisors += [mapping[u] for u in mapping if v % u == 0]
        step = 1
        for d in divisors:
            step = step * d // math.gcd(step, d)
        if _is_pow2(v):
            s = 1 << max(target - 1, 1).bit_length()
            while s % step:
                s <<= 1
        else:
            twos = min(_twos(v), 16, 1 << (max(unit // 2, 2).bit_length() - 1))
            step = step * twos // math.gcd(step, twos)
            s = -(-target // step) * step
            while _is_pow2(s) or (s % 2) != (v % 2) or (v % 2 == 0 and _twos(s) > _twos(v)):
                s += step
                if s > v:
                    break
        if s >= v:
            continue                        # cannot shrink this one while keeping its relations
        mapping[v] = s
        prev = s
    return mapping
