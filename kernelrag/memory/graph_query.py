"""Reading evidence out of the reasoning graph: ranking, explanations, failures.

Pure functions over the graph's records (plain dicts), so they are easy to test
and to reuse. Ranking of a transformation for a pattern:

    score = wilson_lower(successes, attempts) x expected_speedup

where ``expected_speedup`` is the geometric mean, over successful timed records,
of the speedup against the better baseline (the smaller of vs-eager and
vs-compile), 1.0 when nothing was timed. The Wilson lower bound (95 %) keeps one
lucky trial below many steady successes at the same rate.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

OUTCOMES = ("success", "slower", "compile_error", "incorrect", "timeout", "rejected", "crashed")
SIMILAR_DISCOUNT = 0.5        # evidence from a similar pattern counts half, times the similarity


def wilson_lower(successes: int, attempts: int, z: float = 1.96) -> float:
    """Lower bound of the Wilson score interval for a success rate."""
    if attempts <= 0:
        return 0.0
    p = successes / attempts
    denom = 1 + z * z / attempts
    centre = p + z * z / (2 * attempts)
    margin = z * math.sqrt(p * (1 - p) / attempts + z * z / (4 * attempts * attempts))
    return max(0.0, (centre - margin) / denom)


AT_ROOFLINE = 0.9   # fraction of the roofline floor that counts as "at the hardware limit"


def better_baseline_speedup(record: dict[str, Any]) -> float | None:
    """Speedup against the faster of eager and torch.compile (the smaller speedup)."""
    values = [v for v in (record.get("speedup_vs_eager"), record.get("speedup_vs_compile")) if v]
    return min(values) if values else None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def gpu_matches(record_gpu: str | None, wanted: str | None) -> bool:
    """``wanted`` matches case-insensitively as a substring: "h200" matches "NVIDIA H200"."""
    return wanted is None or (wanted.lower() in (record_gpu or "").lower())


@dataclass
class Stats:
    """Aggregates of a set of records (one pattern x transformation, or one bucket)."""

    attempts: int = 0
    successes: int = 0               # outcome "success": the kernel passed the verifier
    timed: int = 0                   # successes timed on a GPU (the rest: correctness only, CPU)
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    success_rate_lb: float = 0.0
    expected_speedup: float = 1.0
    median_speedup_vs_eager: float | None = None
    median_speedup_vs_compile: float | None = None
    best_speedup_vs_eager: float | None = None
    best_speedup_vs_compile: float | None = None
    gpus: list[str] = field(default_factory=list)
    log_ids: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(self.success_rate_lb * self.expected_speedup, 4)


def aggregate(records: Iterable[dict[str, Any]]) -> Stats:
    records = list(records)
    st = Stats(attempts=len(records))
    fails: Counter = Counter()
    eager, compiled, ok_speedups = [], [], []
    for r in records:
        if r["outcome"] == "success":
            st.successes += 1
            st.timed += r.get("kernel_ms") is not None
            s = better_baseline_speedup(r)
            if s:
                ok_speedups.append(s)
        else:
            fails[r["outcome"]] += 1
        if r.get("speedup_vs_eager"):
            eager.append(r["speedup_vs_eager"])
        if r.get("speedup_vs_compile"):
            compiled.append(r["speedup_vs_compile"])
        for key, target in (("gpu", st.gpus), ("log_id", st.log_ids), ("skill", st.skills)):
            if r.get(key) and r[key] not in target:
                target.append(r[key])
    st.failures_by_reason = dict(fails)
    st.success_rate_lb = round(wilson_lower(st.successes, st.attempts), 4)
    st.expected_speedup = round(_geomean(ok_speedups), 4)
    st.median_speedup_vs_eager, st.median_speedup_vs_compile = _median(eager), _median(compiled)
    st.best_speedup_vs_eager = max(eager) if eager else None
    st.best_speedup_vs_compile = max(compiled) if compiled else None
    return st


@dataclass
class Suggestion:
    """A transformation worth trying for a pattern, with the evidence behind the rank."""

    transformation: str
    score: float
    success_rate_lb: float
    attempts: int
    successes: int
    expected_speedup: float
    median_speedup_vs_eager: float | None
    median_speedup_vs_compile: float | None
    best_speedup_vs_eager: float | None
    best_speedup_vs_compile: float | None
    gpus: list[str]
    log_ids: list[str]
    skills: list[str]
    failures_by_reason: dict[str, int]
    source: str = "exact"          # "exact" | "similar:<pattern>"
    similarity: float = 1.0
    name: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line with the numbers: ``online_softmax  score 0.62  4/4 ok  1.9x eager ...``."""
        parts = [f"{self.transformation:24s} score {self.score:.2f}",
                 f"{self.successes}/{self.attempts} verified (lb {self.success_rate_lb:.2f})"]
        if self.median_speedup_vs_eager is not None:
            parts.append(f"median {self.median_speedup_vs_eager:.2f}x eager")
        if self.median_speedup_vs_compile is not None:
            parts.append(f"{self.median_speedup_vs_compile:.2f}x compile")
        if self.gpus:
            parts.append("on " + ", ".join(self.gpus))
        if self.source != "exact":
            parts.append(f"[{self.source}, similarity {self.similarity:.2f}]")
        return "  ".join(parts)


def suggestion(tid: str, st: Stats, vocab: dict[str, dict], source: str = "exact",
               sim: float = 1.0) -> Suggestion:
    discount = 1.0 if source == "exact" else SIMILAR_DISCOUNT * sim
    info = vocab.get(tid, {})
    return Suggestion(
        transformation=tid, score=round(st.score * discount, 4), success_rate_lb=st.success_rate_lb,
        attempts=st.attempts, successes=st.successes, expected_speedup=st.expected_speedup,
        median_speedup_vs_eager=st.median_speedup_vs_eager,
        median_speedup_vs_compile=st.median_speedup_vs_compile,
        best_speedup_vs_eager=st.best_speedup_vs_eager, best_speedup_vs_compile=st.best_speedup_vs_compile,
        gpus=st.gpus, log_ids=st.log_ids, skills=st.skills, failures_by_reason=st.failures_by_reason,
        source=source, similarity=round(sim, 4), name=info.get("name", ""),
        description=info.get("description", ""))


@dataclass
class Bucket:
    """Evidence of one (gpu, dtype, size class) for a pattern x transformation."""

    gpu: str
    dtype: str
    size_class: str
    stats: Stats
    torch_versions: list[str]
    triton_versions: list[str]
    first_date: str
    last_date: str


@dataclass
class Evidence:
    """Everything recorded about a transformation on a pattern."""

    pattern: str
    transformation: str
    stats: Stats
    buckets: list[Bucket]
    records: list[dict[str, Any]]

    @property
    def log_ids(self) -> list[str]:
        return self.stats.log_ids

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["log_ids"] = self.log_ids
        return out

    def summary(self) -> str:
        st = self.stats
        if not st.attempts:
            return f"no evidence recorded for {self.transformation} on {self.pattern}"
        kinds = f"{st.timed} timed on a GPU, {st.successes - st.timed} correctness only (cpu)"
        lines = [f"{self.transformation} on {self.pattern}: {st.successes} of {st.attempts} distinct kernels "
                 f"verified ({kinds}; Wilson lower bound {st.success_rate_lb:.2f}), score {st.score:.2f}"]
        repeats = sum(int(r.get("verifications") or 1) - 1 for r in self.records)
        if repeats:
            lines.append(f"  re-verifications of the same kernel in the same environment: {repeats} "
                         "(counted once each)")
        if st.failures_by_reason:
            lines.append("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(st.failures_by_reason.items())))
        for b in self.buckets:
            s = b.stats
            speed = ""
            if s.median_speedup_vs_eager is not None:
                speed = f", median {s.median_speedup_vs_eager:.2f}x eager (best {s.best_speedup_vs_eager:.2f}x)"
            if s.median_speedup_vs_compile is not None:
                speed += f", median {s.median_speedup_vs_compile:.2f}x compile"
            vers = f"torch {'/'.join(b.torch_versions) or '?'}, triton {'/'.join(b.triton_versions) or '?'}"
            lines.append(f"  {b.gpu} {b.dtype} {b.size_class}: {s.successes}/{s.attempts} verified{speed}; "
                         f"{vers}; {b.first_date[:10]}..{b.last_date[:10]}")
        lines.append("  log ids: " + ", ".join(self.log_ids))
        return "\n".join(lines)


def evidence(pattern: str, tid: str, records: list[dict[str, Any]]) -> Evidence:
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r.get("gpu") or "?", r.get("dtype") or "?", (r.get("regime") or {}).get("size_class", "any"))
        groups.setdefault(key, []).append(r)
    buckets = []
    for (gpu, dtype, size), rs in sorted(groups.items()):
        versions = [r.get("versions") or {} for r in rs]
        dates = sorted(r.get("date", "") for r in rs)
        buckets.append(Bucket(
            gpu=gpu, dtype=dtype, size_class=size, stats=aggregate(rs),
            torch_versions=sorted({v["torch"] for v in versions if v.get("torch")}),
            triton_versions=sorted({v["triton"] for v in versions if v.get("triton")}),
            first_date=dates[0], last_date=dates[-1]))
    return Evidence(pattern=pattern, transformation=tid, stats=aggregate(records),
                    buckets=buckets, records=list(records))


@dataclass
class Failure:
    """One failed or losing attempt: negative knowledge for a pattern."""

    transformations: list[str]
    outcome: str
    gpu: str
    dtype: str
    size_class: str
    log_id: str
    date: str
    detail: str = ""
    skill: str | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        speed = f" ({self.speedup_vs_eager:.2f}x eager" if self.speedup_vs_eager else ""
        if speed:
            speed += f", {self.speedup_vs_compile:.2f}x compile)" if self.speedup_vs_compile else ")"
        detail = f": {self.detail}" if self.detail else ""
        return (f"{'+'.join(self.transformations)} -> {self.outcome}{speed} on {self.gpu} "
                f"{self.dtype} {self.size_class} [{self.log_id}]{detail}")


def failure(record: dict[str, Any]) -> Failure:
    return Failure(
        transformations=list(record["transformations"]), outcome=record["outcome"],
        gpu=record.get("gpu") or "?", dtype=record.get("dtype") or "?",
        size_class=(record.get("regime") or {}).get("size_class", "any"), log_id=record.get("log_id") or "",
        date=record.get("date", ""), detail=record.get("detail") or "", skill=record.get("skill"),
        speedup_vs_eager=record.get("speedup_vs_eager"), speedup_vs_compile=record.get("speedup_vs_compile"))


def outcome_from_verdict(verdict: Any) -> str | None:
    """Graph outcome of a verifier verdict (object or dict); None when nothing was learned.

    ok and timed: "success" when at least as fast as the better baseline, or at >= 90%
    of the roofline floor (a kernel at the hardware limit cannot be beaten, only tied),
    else "slower"; ok but untimed (CPU): "success". "not_checkable" / "weak_task" -> None.
    """
    get = verdict.get if isinstance(verdict, dict) else (lambda k, d=None: getattr(verdict, k, d))
    status = get("status")
    if get("ok"):
        s = better_baseline_speedup({"speedup_vs_eager": get("speedup_vs_eager"),
                                     "speedup_vs_compile": get("speedup_vs_compile")})
        at_limit = (get("frac_roofline") or 0.0) >= AT_ROOFLINE
        return "slower" if (get("timed") and s is not None and s < 1.0 and not at_limit) else "success"
    if status in ("compile_error", "incorrect", "rejected", "timeout", "crashed"):
        return status
    if status == "correct":          # correct but a blocking finding kept it from ok
        return "rejected"
    return None
