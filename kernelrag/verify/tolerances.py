"""One tolerance table keyed by dtype, and the comparison every check uses.

An output element passes when ``|out - ref| <= atol * scale + rtol * |ref|``, where
``scale`` is the root-mean-square of the finite reference values (1 when the
reference is all zeros). Scaling ``atol`` by the output's own magnitude keeps the
test meaningful for tiny outputs (a softmax over a wide row has values ~1/N, so a
fixed atol of 1e-2 would let an all-zero output pass) and for large ones (a sum with
cancellation). On top of the per-element test the whole output must satisfy
``||out - ref|| / ||ref|| <= rel_norm``, and NaN/+Inf/-Inf must sit at the same
positions as in the reference.

fp32 tasks are compared with a float64 reference, so the fp32 row is tight enough to
catch a kernel that quietly computes in bf16 or TF32 (relative error ~1e-3).

The table needs no torch (the parent process validates overrides with it); the
comparison functions import torch when called.
"""
from __future__ import annotations

import math

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float        # times the output's RMS
    rtol: float
    rel_norm: float    # bound on ||out - ref|| / ||ref||
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-10, rtol=1e-8, rel_norm=1e-9, key="float64"),
    "float32": Tolerance(atol=1e-4, rtol=1e-4, rel_norm=1e-5, key="float32"),
    "tf32": Tolerance(atol=5e-3, rtol=5e-3, rel_norm=2e-3, key="tf32"),
    "bfloat16": Tolerance(atol=2e-2, rtol=2e-2, rel_norm=1e-2, key="bfloat16"),
    "float16": Tolerance(atol=5e-3, rtol=5e-3, rel_norm=2e-3, key="float16"),
    "float8": Tolerance(atol=1.5e-1, rtol=1.5e-1, rel_norm=8e-2, key="float8"),
}

# Exact outputs (integers, booleans, argmax indices) must match exactly.
EXACT = Tolerance(atol=0.0, rtol=0.0, rel_norm=0.0, key="exact")


def dtype_key(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name.startswith("float8"):
        return "float8"
    return name if name in TOLERANCES else ("exact" if not dtype.is_floating_point else "float32")


def check_override(override: dict[str, Any] | str | None) -> None:
    """Raise ValueError unless ``override`` is None, a row name, or a dict of atol/rtol/rel_norm."""
    if override is None:
        return
    if isinstance(override, str):
        if override not in TOLERANCES:
            raise ValueError(f"tolerance {override!r} is not in the table; valid: {', '.join(TOLERANCES)}")
        return
    if not isinstance(override, dict):
        raise ValueError(f"tolerance {override!r} must be a row name or a dict with atol, rtol, rel_norm")
    unknown = set(override) - {"atol", "rtol", "rel_norm"}
    if unknown:
        raise ValueError(f"unknown tolerance fields {sorted(unknown)}; valid: atol, rtol, rel_norm")


def tolerance_for(dtype: torch.dtype, override: dict[str, Any] | str | None = None) -> Tolerance:
    """The table's row for ``dtype``; ``override`` is a row name ("tf32") or a dict of fields."""
    check_override(override)
    if isinstance(override, str):
        return TOLERANCES[override]
    key = dtype_key(dtype)
    base = EXACT if key == "exact" else TOLERANCES[key]
    if override:
        fields = {**asdict(base), **{k: float(v) for k, v in override.items()}, "key": "override"}
        if "rel_norm" not in override:
            fields["rel_norm"] = max(base.rel_norm, float(override.get("rtol", base.rtol)) / 10)
        return Tolerance(**fields)
    return base


@dataclass
class Comparison:
    passed: bool
    numel: int
    mismatch_count: int = 0          # elements out of tolerance (incl. NaN/Inf disagreement)
    nonfinite_mismatch: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_norm_err: float = 0.0
    first_bad_indices: list[list[int]] = field(default_factory=list)
    problem: str = ""                # shape/dtype mismatch, when values could not be compared

    def describe(self) -> str:
        if self.problem:
            return self.problem
        text = f"{self.mismatch_count}/{self.numel} elements out of tolerance"
        if self.nonfinite_mismatch:
            text += (f", NaN/Inf disagree at {self.nonfinite_mismatch} positions (unwritten outputs read as "
                     "NaN); among the rest")
        text += (f", max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}, "
                 f"rel-norm err {self.rel_norm_err:.3g}")
        if self.first_bad_indices:
            text += f", first bad indices {self.first_bad_indices[:5]}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_CHUNK = 1 << 24   # elements compared at once, to bound temporary memory on huge outputs


CALIBRATION = 4.0   # an element may differ from the reference by this many times PyTorch's own error there


def slack_of(native: torch.Tensor, ref: torch.Tensor) -> torch.Tensor | None:
    """|PyTorch's own output - the high-precision reference|, element by element (fp32), or None."""
    import torch

    if not (native.is_floating_point() and ref.is_floating_point()) or native.shape != ref.shape:
        return None
    diff = (native.double() - ref.double()).abs()
    return torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff)).float()


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, slack: torch.Tensor | None = None) -> Comparison:
    """Compare ``out`` with ``ref`` element by element and as a whole (see module doc).

    ``slack`` (from ``slack_of``) calibrates both tests: where the task is so
    ill-conditioned that PyTorch itself, in the task's precision, lands far from the
    high-precision reference (attention or a softmax over large-magnitude scores, where
    near-ties turn fp32 rounding into 1e-4 of relative-norm error), a kernel may land
    ``CALIBRATION`` times as far, element by element (its error there plus its error almost
    everywhere, ``_slack_floor``, so that an element where PyTorch's rounding happened to
    cancel asks no more of a kernel than PyTorch's usual accuracy) and as a whole. Elsewhere
    PyTorch's error is ~0 and the table rules. Zeros, constants and other seeds' outputs stay far
    outside either bound (the null controls check that per trial), and a downcast is
    caught wherever PyTorch itself is accurate.
    """
    import torch

    numel = ref.numel()
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, numel, numel, problem=f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if numel == 0:
        return Comparison(True, 0)
    o_flat, r_flat = out.detach().reshape(-1), ref.detach().reshape(-1)
    # pass 1: reference scale (RMS of finite values) and norms
    sq_ref, n_fin = 0.0, 0
    for s in range(0, numel, _CHUNK):
        r = r_flat[s:s + _CHUNK].double()
        fin = torch.isfinite(r)
        sq_ref += float((r[fin] ** 2).sum())
        n_fin += int(fin.sum())
    rms = (sq_ref / n_fin) ** 0.5 if n_fin else 0.0
    scale = rms if rms > 0 else 1.0
    res = Comparison(True, numel)
    sq_diff = 0.0
    bad_positions: list[int] = []
    calibrated = slack is not None and slack.shape == ref.shape
    slack_floor = _slack_floor(slack) if calibrated else 0.0
    for s in range(0, numel, _CHUNK):
        o = o_flat[s:s + _CHUNK].double()
        r = r_flat[s:s + _CHUNK].double()
        nonfin = ~((torch.isnan(o) == torch.isnan(r)) & (torch.isposinf(o) == torch.isposinf(r))
                   & (torch.isneginf(o) == torch.isneginf(r)))
        both = torch.isfinite(o) & torch.isfinite(r)
        diff = torch.where(both, (o - r).abs(), torch.zeros_like(o))
        absr = torch.where(both, r.abs(), torch.zeros_like(r))
        allowed = tol.atol * scale + tol.rtol * absr
        if calibrated:
            allowed = allowed + CALIBRATION * (slack.detach().reshape(-1)[s:s + _CHUNK].double() + slack_floor)
        bad = (diff > allowed) | nonfin
        res.nonfinite_mismatch += int(nonfin.sum())
        res.mismatch_count += int(bad.sum())
        sq_diff += float((diff ** 2).sum())
        if diff.numel():
            res.max_abs_err = max(res.max_abs_err, float(diff.max()))
            # relative error only where the reference is not itself ~0 at this scale
            big = absr > tol.atol * scale
            if bool(big.any()):
                res.max_rel_err = max(res.max_rel_err, float((diff[big] / absr[big]).max()))
        if len(bad_positions) < 5 and bool(bad.any()):
            bad_positions += [s + int(i) for i in torch.nonzero(bad).reshape(-1)[:5 - len(bad_positions)]]
    res.rel_norm_err = (sq_diff ** 0.5) / (sq_ref ** 0.5) if sq_ref > 0 else sq_diff ** 0.5
    res.first_bad_indices = [_unravel(p, tuple(ref.shape)) for p in bad_positions]
    rel_norm_allowed = tol.rel_norm
    if calibrated and sq_ref > 0:
        native_rel_norm = float(slack.double().norm()) / (sq_ref ** 0.5)
        rel_norm_allowed = max(tol.rel_norm, CALIBRATION * native_rel_norm)
    res.passed = res.mismatch_count == 0 and res.rel_norm_err <= rel_norm_allowed
    return res


SLACK_QUANTILE = 0.999   # PyTorch's error "almost everywhere": the floor under its error at one element
_SAMPLE = 1 << 20
MIN_ROUNDED = 100   # rounded elements in the sample for their own quantile to be the floor


def _slack_floor(slack: torch.Tensor) -> float:
    """PyTorch's own error almost everywhere it rounds (its ``SLACK_QUANTILE`` over the
    elements where it is not exact, in an even sample of at most a million), a floor under
    its error at each element: a GEMM's rounding that happened to cancel at one element (a
    sum near zero, kept by a clamp) must not ask a kernel summing in another order, as
    accurate on the whole, to cancel there too. The exact elements stay out of the quantile
    once ``MIN_ROUNDED`` elements of the sample round: where a clamp saturates 99.9% of a
    GEMM's outputs (large inputs), they would pull the floor to zero and leave the few
    outputs the clamp kept to agree with cuBLAS's rounding (H200, 2026-12-02: 3xTF32, more
    accurate than cuBLAS, failed on 2 of 16.7M elements). Fewer rounded elements than that
    are ill-conditioned ones, which do not move the floor (nor do a few among many); the
    relative-norm bound still holds the whole output to PyTorch's accuracy."""
    import torch

    flat = slack.detach().reshape(-1)
    sample = flat[::max(1, flat.numel() // _SAMPLE)].double()
    rounded = sample[sample > 0]
    population = rounded if rounded.numel() >= MIN_ROUNDED else sample
    return float(torch.quantile(population, SLACK_QUANTILE)) if population.numel() else 0.0


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim)
        flat //= dim
    return list(reversed(idx))


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], tols: list[Tolerance],
                    slacks: list[torch.Tensor | None] | None = None) -> list[Comparison]:
    """Compare each output of a (possibly tuple-valued) forward with its reference."""
    if len(outs) != len(refs):
        return [Comparison(False, 0, problem=f"{len(outs)} outputs, expected {len(refs)}")]
    slacks = slacks or [None] * len(refs)
    return [compare(o, r, t, sl) for o, r, t, sl in zip(outs, refs, tols, slacks)]


def worst(comparisons: list[Comparison]) -> Comparison:
    """The comparison that failed worst (most bad elements, then largest rel-norm error)."""
    return max(comparisons, key=lambda c: (not c.passed, bool(c.problem), c.mismatch_count, c.rel_norm_err))


# ---- re-checking outputs produced while timed (hack 12) ---------------------------
# Looser than ``compare`` by design: the timed call ran at full size, where the
# calibrated per-element slack is not available; a stale or partial result is far off.

RECHECK_REL_NORM_TOL = 0.05   # far above fp32/bf16 rounding, far below a stale result (~1.4)


def recheck_outputs(candidate_out: Any, reference_out: Any, *, atol: float | None = None,
                    rtol: float | None = None, rel_norm_tol: float = RECHECK_REL_NORM_TOL) -> dict[str, Any]:
    """Compare one output the candidate produced while timed with the reference's on the same inputs.

    Fails on a shape or count difference, a NaN/Inf disagreement, a relative-norm error
    ``‖out-ref‖/‖ref‖`` above ``rel_norm_tol``, or (when ``atol`` and ``rtol`` are given)
    any element outside ``atol + rtol*|ref|``.
    """
    import torch

    result = {"passed": True, "max_abs_err": 0.0, "rel_norm_err": 0.0, "mismatch_count": 0,
              "nonfinite_mismatch": 0, "detail": ""}
    cands, refs = _leaves(candidate_out), _leaves(reference_out)
    if len(cands) != len(refs):
        return _failed(result, f"{len(cands)} outputs from the candidate, {len(refs)} from the reference")
    for i, (c, r) in enumerate(zip(cands, refs)):
        if not isinstance(r, torch.Tensor):
            if c != r:
                return _failed(result, f"output {i} is {c!r}, the reference's {r!r}")
            continue
        if not isinstance(c, torch.Tensor):
            return _failed(result, f"output {i} is a {type(c).__name__}, not a tensor")
        if tuple(c.shape) != tuple(r.shape):
            return _failed(result, f"output {i} has shape {tuple(c.shape)}, the reference {tuple(r.shape)}")
        _compare(c.detach(), r.detach(), atol, rtol, result)
    problems = []
    if result["nonfinite_mismatch"]:
        problems.append(f"{result['nonfinite_mismatch']} NaN/Inf disagreements")
    if not result["rel_norm_err"] <= rel_norm_tol:
        problems.append(f"relative-norm error {result['rel_norm_err']:.3g} > {rel_norm_tol:g}")
    if result["mismatch_count"]:
        problems.append(f"{result['mismatch_count']} elements outside atol={atol:g}, rtol={rtol:g}")
    return _failed(result, "; ".join(problems)) if problems else result


def merge_rechecks(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of the per-round rechecks: worst errors, failed rounds, first failure."""
    failed = [i for i, r in enumerate(rounds) if not r["passed"]]
    return {
        "passed": not failed,
        "rounds": len(rounds),
        "failed_rounds": len(failed),
        "first_failed_round": failed[0] if failed else None,
        "max_abs_err": max((r["max_abs_err"] for r in rounds), default=0.0),
        "rel_norm_err": max((r["rel_norm_err"] for r in rounds), default=0.0),
        "mismatch_count": max((r["mismatch_count"] for r in rounds), default=0),
        "nonfinite_mismatch": max((r["nonfinite_mismatch"] for r in rounds), default=0),
        "detail": rounds[failed[0]]["detail"] if failed else "",
    }


def _leaves(out: Any) -> list:
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _leaves(item)]
    return [out]


def _failed(result: dict[str, Any], detail: str) -> dict[str, Any]:
    result["passed"] = False
    result["detail"] = detail
    return result


def _compare(c: torch.Tensor, r: torch.Tensor, atol, rtol, result: dict[str, Any]) -> None:
    """Accumulate errors of ``c`` against ``r`` into ``result``, in chunks to bound memory."""
    import torch

    if c.numel() == 0:
        return
    c = c.to(r.device)
    if c.is_complex() or r.is_complex():
        c, r = torch.view_as_real(c.to(torch.complex128)), torch.view_as_real(r.to(torch.complex128))
    c, r = c.reshape(-1), r.reshape(-1)
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    # running totals stay on the device, read back once: a host sync per chunk and statistic
    # cost more than the arithmetic on a GPU (nonfinite, max abs, err², ref², mismatches)
    acc = torch.zeros(5, dtype=torch.float64, device=r.device)
    for lo in range(0, r.numel(), _CHUNK):
        c64, r64 = c[lo:lo + _CHUNK].to(torch.float64), r[lo:lo + _CHUNK].to(torch.float64)
        nan_c, nan_r = c64.isnan(), r64.isnan()
        inf_bad = (c64.isinf() | r64.isinf()) & (c64 != r64) & ~(nan_c | nan_r)
        acc[0] += (nan_c != nan_r).sum() + inf_bad.sum()
        finite = torch.isfinite(c64) & torch.isfinite(r64)
        diff = torch.where(finite, (c64 - r64).abs(), zero)
        acc[1] = torch.maximum(acc[1], diff.max())
        acc[2] += diff.square().sum()
        acc[3] += torch.where(finite, r64, zero).square().sum()
        if atol is not None and rtol is not None:
            acc[4] += (finite & (diff > atol + rtol * r64.abs())).sum()
    nonfinite, max_abs, err_sq, ref_sq, mismatches = acc.tolist()
    result["nonfinite_mismatch"] += int(nonfinite)
    result["max_abs_err"] = max(result["max_abs_err"], max_abs)
    result["mismatch_count"] += int(mismatches)
    rel = math.sqrt(err_sq / ref_sq) if ref_sq > 0 else (0.0 if err_sq == 0 else math.inf)
    result["rel_norm_err"] = max(result["rel_norm_err"], rel)
