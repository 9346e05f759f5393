"""Which precision path an fp32 product ran on, and which measured ceiling bounds it.

An fp32 ``tl.dot`` can run three ways on an NVIDIA tensor-core GPU, chosen by
``input_precision``:

| path     | what multiplies                                 | relative error (4096^3) |
|----------|--------------------------------------------------|-------------------------|
| ieee     | fp32 FMAs on the CUDA cores (cuBLAS fp32 too)    | ~1e-6                   |
| tf32     | one TF32 tensor-core product (10-bit mantissa)   | ~3e-4 to 1e-3           |
| tf32x3   | three TF32 products of a hi/lo split (3xTF32)    | ~2.5e-7                 |

A kernel may also split fp32 operands into bf16 parts itself and name its path (the
lowering's ``bf16x6``: three exact bf16 parts per operand, six products, Kahan-summed
over K); its ceiling is not measured separately, so it is judged against the fp32 ones.

Triton's default for fp32 operands is "tf32". Under Triton's CPU interpreter every
fp32 dot is computed in IEEE fp32 whatever is asked. The verdict reports the path that
ran: the string constexprs the candidate passed to its launches (seen by the guard),
else the ``input_precision=`` literals in its source.

The honest compute ceiling of an fp32 task is the fastest measured path whose error
still passes the task's tolerance (``ceilings.measure_ceilings`` measures each path's
rate and its error against fp64); a bf16 ceiling would flatter nothing and judge an
fp32 kernel against a rate no fp32-accurate path reaches. A split path's rate is bounded
by the tensor-core products it issues: 3xTF32 is three TF32 products, so its ceiling is
the measured TF32 rate / 3 where that is above the measured tf32x3 kernel (that kernel is
one design; the lowering's, which splits B before the K loop, outran it by 12% on an H100
on 2026-12-07, which a ceiling must not allow).

Standard library only.
"""
from __future__ import annotations

import ast
from typing import Any, Iterable

DOT_PRECISIONS = ("ieee", "tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9", "hf32")
PATH_NOTES = {
    "ieee": "IEEE fp32 FMAs",
    "tf32": "one TF32 tensor-core product, ~1e-3 relative error",
    "tf32x3": "3xTF32: three TF32 tensor-core products of a hi/lo split, fp32-level error",
    "bf16x6": "six bf16 tensor-core products of an exact three-part split of each operand, compensated sums",
    "default": "Triton's default for fp32 operands: TF32 on tensor cores, ~1e-3 relative error",
}
# measured fp32 paths in the ceilings, fastest-first is decided by the numbers, not this order
FP32_PATH_KEYS = ("ieee", "tf32", "tf32x3")
# TF32 tensor-core products a split path issues per product: its rate is at most TF32's / this
TF32_PRODUCTS = {"tf32x3": 3}


def source_precisions(source: str) -> list[str]:
    """``input_precision=`` values written in the source's ``.dot(...)`` calls ("default" for a
    dot without one); names bound at module level to a string are followed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    strings = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
               for t in node.targets if isinstance(t, ast.Name)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot"):
            continue
        kw = next((k for k in node.keywords if k.arg == "input_precision"), None)
        if kw is None:
            found.add("default")
        elif isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            found.add(kw.value.value)
        elif isinstance(kw.value, ast.Name) and kw.value.id in strings:
            found.add(strings[kw.value.id])
        else:
            found.add("runtime")   # a constexpr argument: the launches say which
    return sorted(found)


def describe(launched: Iterable[str] | None, written: Iterable[str] | None, device: str,
             input_dtypes: Iterable[str] | None = None) -> str | None:
    """One line naming the precision path(s) that ran, or None when the candidate has no dot
    or the task has no fp32 input (``input_precision`` only matters for fp32 operands)."""
    if input_dtypes is not None and not any("float32" in str(d) for d in input_dtypes):
        return None
    ran = sorted(set(launched or ()))
    src = sorted(set(written or ()) - {"runtime"})
    if not ran and not src and "runtime" not in set(written or ()):
        return None
    paths = ran or src
    if not paths:
        return "tl.dot precision chosen at run time; no launch passed a precision string"
    text = ", ".join(f"{p} ({PATH_NOTES.get(p, 'as named')})" for p in paths)
    how = "passed to the launches" if ran else "written in the source"
    if device == "cpu":
        return f"{text}, {how}; under Triton's CPU interpreter every fp32 dot runs in IEEE fp32"
    return f"{text}, {how}"


def fp32_ceiling(ceilings: dict[str, Any], rel_norm_tol: float | None) -> tuple[float | None, str | None]:
    """(TFLOP/s, name) of the fastest measured fp32 path whose error passes ``rel_norm_tol``.

    ``ceilings["fp32_paths"]`` holds ``{path: {"tflops", "rel_err", "how"}}``; without it
    (an older cache) the plain ``fp32_tflops`` (cuBLAS, TF32 off) is the ceiling.
    """
    paths = ceilings.get("fp32_paths")
    if isinstance(paths, dict) and paths:
        tol = float(rel_norm_tol) if rel_norm_tol is not None else 1e-5
        passing = [(*_path_bound(paths, name, p), name, p) for name, p in paths.items()
                   if isinstance(p, dict) and _positive(p.get("tflops")) and _finite(p.get("rel_err"))
                   and float(p["rel_err"]) <= tol]
        if passing:
            tflops, bound, name, info = max(passing, key=lambda x: x[0])
            return tflops, (f"fp32 via {name} ({info.get('how', name)}, relative error "
                            f"{float(info['rel_err']):.2g} <= tolerance {tol:.2g}{bound})")
    value = ceilings.get("fp32_tflops")
    if _positive(value):
        return float(value), "fp32 via cuBLAS IEEE fp32 (TF32 off)"
    return None, None


def _path_bound(paths: dict[str, Any], name: str, info: dict[str, Any]) -> tuple[float, str]:
    """(TFLOP/s, how it was bounded) of one measured path: a split path's rate is raised to the
    measured TF32 rate over its TF32 products when that is higher."""
    measured = float(info["tflops"])
    tf32 = paths.get("tf32")
    products = TF32_PRODUCTS.get(name)
    if products and isinstance(tf32, dict) and _positive(tf32.get("tflops")):
        bound = float(tf32["tflops"]) / products
        if bound > measured:
            return bound, (f"; bounded by {products} TF32 products at the measured TF32 rate, above the "
                           f"kernel's {measured:.1f} TFLOP/s")
    return measured, ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")


def _positive(value: Any) -> bool:
    return _finite(value) and value > 0
