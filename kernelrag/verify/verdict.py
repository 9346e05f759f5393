"""The typed result of one verification: what ran, what passed, what was measured.

A ``Verdict`` is plain data (standard library only) so it can cross process
boundaries as JSON, be stored in optimisation logs and be read back with
``Verdict.from_dict``. ``summary()`` is one human line; ``feedback()`` is the
text a drafting LLM gets: the failure first, with the numbers it needs to act.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("correct", "incorrect", "compile_error", "rejected", "timeout", "crashed",
            "not_checkable", "weak_task")


@dataclass
class Check:
    """One check that ran, e.g. ``compare[trial 2, heavy_tailed]`` or ``inputs-unchanged``."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Finding:
    """A rule the candidate's source (or its behaviour at run time) broke."""

    rule: str
    line: int | None
    message: str
    blocking: bool = True


@dataclass
class Timing:
    """A median time with its spread and the number of timed calls."""

    median_ms: float
    iqr_ms: float
    trials: int

    @classmethod
    def from_any(cls, value: Any) -> "Timing | None":
        if value is None or isinstance(value, Timing):
            return value
        return cls(median_ms=float(value["median_ms"]), iqr_ms=float(value.get("iqr_ms", 0.0)),
                   trials=int(value.get("trials", 0)))


PHASES = ("static", "process_start", "imports", "setup", "reference_build", "plan_wait", "candidate_import",
          "correctness", "comparison", "gpu_wait", "baseline", "ceilings", "first_call", "compile", "warmup",
          "timing", "launch_proof", "recheck", "teardown", "other")


@dataclass
class Phases:
    """Wall seconds of each phase of one verification, from the parent and both processes.

    ``process_start``: spawn to the candidate process's first line; ``imports``: torch,
    triton and the verifier in it (both spent before the job arrived when the process came
    warm from a pool, see ``reused``); ``setup``: the candidate process from its job to
    ready (limits; on a GPU its CUDA context unless that was made ahead); ``reference_build``:
    sizes, references and null controls in the reference process; ``plan_wait``: the
    candidate waiting for the reference's plan beyond that build; ``correctness``: the candidate's trials;
    ``comparison``: the reference process comparing their outputs; ``gpu_wait``: waiting
    for the GPU while another process was timed (before its own timing, and for its share
    back after each compile, which holds none: ``yielding``); ``baseline``: waiting for the task's
    torch.compile baseline, compiled and timed in a reference process of its own (once per
    task and session, mostly while the task's first candidate runs its trials);
    ``ceilings``: reading the GPU's cached ceilings (measured once per machine and driver);
    ``first_call``: the first call at the timed size with its full-size check (before the
    "go", the GPU shared);
    ``compile``: torch.compile of the reference in the candidate process (when interleaved);
    ``warmup`` and ``timing``: the timed loop; ``launch_proof``: the profiled call;
    ``recheck``: the output re-check after timing; ``teardown``: ending the candidate process
    and handing the reference process back; ``other``: the rest of the wall time.
    ``reused`` names what came from a cache: "reference" (outputs of the fixed trial seeds
    in a warm reference process), "compile-baseline" (the task's one torch.compile figure of
    the session), "warm-process" (started ahead, imports done), "zygote-fork" (forked from a
    process that imported torch and triton).
    """

    seconds: dict[str, float] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    yielded: int = 0                 # Triton compiles during which the candidate held none of the GPU

    @classmethod
    def from_any(cls, value: Any) -> "Phases | None":
        if value is None or isinstance(value, Phases):
            return value
        return cls(seconds={k: float(v) for k, v in (value.get("seconds") or {}).items()},
                   reused=list(value.get("reused") or []), yielded=int(value.get("yielded") or 0))

    def add(self, name: str, seconds: float | None) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases are {', '.join(PHASES)}")
        if seconds is not None and seconds >= 0:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + float(seconds), 3)

    def line(self, top: int = 5) -> str:
        """The largest phases, e.g. ``timing 1.2 s, compile 0.8 s, ...; reused reference``."""
        ranked = sorted(((v, k) for k, v in self.seconds.items() if v >= 0.05), reverse=True)[:top]
        text = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for v, k in ranked) or "no phase over 0.05 s"
        text += f"; {self.yielded} compile(s) off the GPU gate" if self.yielded else ""
        return text + (f"; reused {', '.join(self.reused)}" if self.reused else "")


@dataclass
class Verdict:
    ok: bool = False                       # compiled, correct, no blocking finding, task not weak
    status: str = "not_checkable"          # one of STATUSES
    reason: str = ""                       # one line
    compiled: bool = False
    correct: bool = False
    checkable: bool = True                 # False: could not be checked here (see reason)
    error: str | None = None               # truncated error text (traceback tail, stderr tail)
    checks: list[Check] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_norm_err: float | None = None      # ||out - ref|| / ||ref||, worst trial
    mismatch_count: int | None = None      # elements out of tolerance, worst trial
    first_bad_indices: list[list[int]] = field(default_factory=list)
    nonfinite_mismatch: int | None = None  # positions where NaN/Inf disagree, worst trial
    device: str = "cpu"
    shrunk_sizes: dict[str, list[int]] | None = None   # name -> [original, size checked, ...]
    trials: int = 0
    seed: int | None = None
    timed: bool = False
    untimed_cause: str | None = None       # "gpu_memory": a time (the kernel's or torch.compile's) is
                                           # missing because other processes held the GPU's memory
    kernel_ms: Timing | None = None
    eager_ms: Timing | None = None
    compile_ms: Timing | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    compile_source: str | None = None      # how compile_ms was obtained (interleaved, or cached and drift-scaled)
    flops: int | None = None
    bytes_moved: int | None = None
    bytes_read: int | None = None          # bytes_moved split: inputs + parameters read,
    bytes_written: int | None = None       # outputs written (None: no split known)
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    frac_bandwidth: float | None = None
    frac_compute: float | None = None
    roofline_floor_ms: float | None = None
    frac_roofline: float | None = None
    ceiling: str | None = None             # the compute ceiling the roofline used, named
    memory_ceiling: str | None = None      # the bandwidth ceiling(s) its memory floor used, named
    precision: str | None = None           # the tl.dot precision path(s) that ran, e.g. tf32x3
    profile: dict[str, Any] | None = None  # ncu counters of the candidate's kernels (opt-in)
    gpu: str | None = None
    driver: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    isolation: str = ""                    # OS isolation the candidate ran under ("none: why" when none)
    phases: Phases | None = None           # wall seconds per phase (see Phases)

    # ------------------------------------------------------------------ data
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["checks"] = [c if isinstance(c, Check) else Check(**c) for c in values.get("checks", [])]
        values["findings"] = [f if isinstance(f, Finding) else Finding(**f)
                              for f in values.get("findings", [])]
        for name in ("kernel_ms", "eager_ms", "compile_ms"):
            values[name] = Timing.from_any(values.get(name))
        values["phases"] = Phases.from_any(values.get("phases"))
        return cls(**values)

    # ------------------------------------------------------------- views
    @property
    def blocking_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking]

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def summary(self) -> str:
        """One or two lines for a person: status, why, the key numbers."""
        where = self.device + (" (Triton interpreter)" if self.device == "cpu" else "")
        head = f"{self.status}: {self.reason}" if self.reason else self.status
        parts = [head, f"[{where}, {self.trials} trials, {self.wall_s:.1f} s]"]
        if self.rel_norm_err is not None and self.status in ("correct", "incorrect", "weak_task"):
            parts.append(f"max abs err {_g(self.max_abs_err)}, rel-norm err {_g(self.rel_norm_err)}")
        if self.timed and self.kernel_ms is not None:
            parts.append(_timing_line(self))
        elif self.status in ("correct", "weak_task"):
            parts.append("no time measured")
        if self.isolation.startswith("none"):
            parts.append("ran WITHOUT OS isolation (" + self.isolation.partition(": ")[2].split(";")[0] + ")")
        if self.phases is not None and self.phases.seconds:
            parts.append("phases: " + self.phases.line())
        if self.shrunk_sizes:
            parts.append("sizes shrunk: " + ", ".join(
                f"{k} {v[0]}->{'/'.join(str(x) for x in v[1:])}" for k, v in self.shrunk_sizes.items()))
        return "; ".join(parts)

    def review_flags(self) -> list[str]:
        """Why this result must not enter memory without a person's review (VERIFY.md 18):
        a speedup over 10x, or a time within 10% of the roofline floor."""
        from kernelrag.verify.roofline import review_flags

        return review_flags(self.speedup_vs_eager, self.speedup_vs_compile, self.frac_roofline)

    def recommendation(self) -> str:
        """What to run for this task, judged against the better baseline and the roofline."""
        return recommend(self.ok, self.timed, self.speedup_vs_eager, self.speedup_vs_compile,
                         self.frac_roofline, self.reason or self.status)

    def feedback(self) -> str:
        """What a drafting LLM needs to fix the candidate, most important first."""
        lines = [f"Verification result: {self.status}. {self.reason}".rstrip()]
        blocking = self.blocking_findings
        if blocking:
            lines.append("Rules broken (the kernel is rejected until these are fixed):")
            lines += [f"- line {f.line}: [{f.rule}] {f.message}" if f.line else f"- [{f.rule}] {f.message}"
                      for f in blocking]
        if self.error:
            lines.append("Error (last lines):")
            lines.append(_tail(self.error, 25))
        failed = self.failed_checks
        if failed:
            lines.append("Failed checks:")
            lines += [f"- {c.name}: {c.detail}" for c in failed[:4]]
            if len(failed) > 4:
                lines.append(f"- ... and {len(failed) - 4} more: " + ", ".join(c.name for c in failed[4:12]))
        if self.mismatch_count:
            lines.append(
                f"Mismatch: {self.mismatch_count} elements out of tolerance; max abs err "
                f"{_g(self.max_abs_err)}, max rel err {_g(self.max_rel_err)}, "
                f"rel-norm err {_g(self.rel_norm_err)}; first bad indices {self.first_bad_indices[:5]}.")
        if self.nonfinite_mismatch:
            lines.append(f"NaN/Inf disagree with the reference at {self.nonfinite_mismatch} positions "
                         "(NaN in an output usually means an element was never written: outputs start "
                         "filled with NaN).")
        if self.status == "correct" and self.timed:
            lines.append(_timing_line(self))
            if self.ceiling:
                lines.append(f"Roofline compute ceiling: {self.ceiling}.")
            if self.memory_ceiling:
                lines.append(f"Roofline memory ceiling: {self.memory_ceiling}.")
        if self.precision:
            lines.append(f"Precision path: {self.precision}.")
        if self.profile:
            lines.append(_profile_line(self.profile))
        elif self.status == "correct":
            lines.append("Correct under Triton's interpreter on CPU; no time measured." if self.device == "cpu"
                         else "Correct; no time measured.")
        soft = [f for f in self.findings if not f.blocking]
        if soft:
            lines.append("Warnings from the source check:")
            lines += [f"- line {f.line}: [{f.rule}] {f.message}" for f in soft[:5]]
        if self.warnings:
            lines.append("Notes: " + "; ".join(self.warnings[:5]) + ".")
        return "\n".join(lines)


AT_ROOFLINE = 0.9   # a kernel at this fraction of the roofline floor is at the hardware limit


def recommend(ok: bool, timed: bool, speedup_vs_eager: float | None, speedup_vs_compile: float | None,
              frac_roofline: float | None, reason: str = "") -> str:
    """One line: use the kernel, or the baseline that beats it, and why.

    "Faster" is judged against the better of eager PyTorch and torch.compile (the
    smaller of the two speedups); a slower kernel is never recommended.
    """
    if not ok:
        return f"keep the PyTorch reference: no verified kernel ({reason})"
    speedups = {"eager PyTorch": speedup_vs_eager, "torch.compile": speedup_vs_compile}
    measured = {k: v for k, v in speedups.items() if v}
    if not timed or not measured:
        return "verified for correctness only (no time measured on this device)"
    baseline, worst = min(measured.items(), key=lambda kv: kv[1])
    if worst >= 1.0:
        return f"use the kernel: {worst:.2f}x faster than {baseline}, the better baseline"
    at_limit = (frac_roofline or 0.0) >= AT_ROOFLINE
    tail = (f"; the kernel is at {frac_roofline:.0%} of the roofline, so both run at the hardware limit"
            if at_limit else "")
    return f"use {baseline}: the kernel is {1 / worst:.2f}x slower{tail}"


def _profile_line(profile: dict[str, Any]) -> str:
    """The profiler's reading in one line: limiter first, then the numbers behind it."""
    if not profile.get("profiled"):
        return f"Profiler: none ({profile.get('note', 'not run')}); event timing only."
    main = profile.get("main") or {}
    parts = [f"limiter {main.get('limiter', 'n/a')}"]
    for key, label in (("sol_memory_pct", "SOL memory"), ("sol_compute_pct", "SOL compute"),
                       ("achieved_occupancy_pct", "achieved occupancy")):
        if main.get(key) is not None:
            parts.append(f"{label} {main[key]:.0f}%")
    if main.get("dram_bytes") is not None:
        parts.append(f"DRAM {main['dram_bytes'] / 1e6:.1f} MB")
    head = f"Profiler (ncu, kernel {main.get('kernel', '?')}, {profile.get('kernels', 1)} kernel(s)): "
    return head + ", ".join(parts) + (f". {main['advice']}" if main.get("advice") else ".")


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _tail(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _timing_line(v: Verdict) -> str:
    k = v.kernel_ms
    text = f"kernel {k.median_ms:.4g} ms (IQR {k.iqr_ms:.2g}, {k.trials} calls)"
    if v.eager_ms is not None:
        text += f", eager {v.eager_ms.median_ms:.4g} ms (x{_g(v.speedup_vs_eager)})"
    if v.compile_ms is not None:
        cached = " cached, drift-scaled" if (v.compile_source or "").startswith("cached") else ""
        text += f", torch.compile {v.compile_ms.median_ms:.4g} ms (x{_g(v.speedup_vs_compile)}{cached})"
    if v.frac_roofline is not None:
        text += f", {100 * v.frac_roofline:.0f}% of the roofline floor {_g(v.roofline_floor_ms)} ms"
    return text
