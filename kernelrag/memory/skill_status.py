"""The vocabulary of skill states, and whether a skill's measurement holds here.

One skill has three facts, shown the same way by ``kernelrag skills list``,
``kernelrag graph why``, the UI and MCP:

- its **state** (``REVIEW_STATES``, stored in skill.toml ``[review]``):
  draft (written, never verified), verified (passed the verifier), approved
  (verified and accepted by a person), needs_review (passed, but its numbers were
  implausible: over 10x, or at the roofline floor; waits for a person), retired
  (no longer offered);
- its **evidence** (``EVIDENCE``, from ``[provenance]``): timed (a GPU run timed it
  against eager and torch.compile), correctness (checked on the CPU under the Triton
  interpreter: no time measured), none (never measured);
- its **freshness** here: current, stale (the toolchain or GPU that the evidence
  depends on differs here), or not re-checkable (GPU timing on a machine without a
  GPU: this machine can neither confirm nor contradict it, so it is not stale).

What the evidence depends on: GPU timing depends on the GPU model and the torch and
triton versions (major.minor); a CPU correctness check depends on torch and triton
only. Standard library only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

REVIEW_STATES = ("draft", "verified", "approved", "retired", "needs_review")
STATE_MEANINGS = {
    "draft": "written, never verified",
    "verified": "passed the verifier",
    "approved": "verified and accepted by a person",
    "needs_review": "passed, but its numbers look implausible; waits for a person",
    "retired": "no longer offered",
}
EVIDENCE = {
    "timed": "timed on a GPU against eager and torch.compile",
    "correctness": "correctness only (CPU, Triton interpreter): no time measured",
    "none": "never measured",
}
NEVER_MEASURED = "never measured"


def _major_minor(version: str | None) -> str:
    return ".".join(str(version or "").split("+")[0].split(".")[:2])


def evidence_kind(provenance: dict[str, Any]) -> str:
    """``timed``, ``correctness`` or ``none`` for a skill's ``[provenance]``."""
    if not provenance or not provenance.get("date"):
        return "none"
    timed = provenance.get("timed")
    if timed is None:                       # older records: a kernel time means a GPU run
        timed = provenance.get("kernel_ms") is not None
    return "timed" if timed else "correctness"


def stale_reason(provenance: dict[str, Any], env: dict[str, str | None]) -> str | None:
    """Why the evidence does not hold on ``env`` (``{"torch", "triton", "gpu"}``), or None.

    ``NEVER_MEASURED`` without evidence. GPU timing is not judged on a machine without
    a GPU (see the module docstring)."""
    kind = evidence_kind(provenance)
    if kind == "none":
        return NEVER_MEASURED
    if kind == "timed" and not env.get("gpu"):
        return None
    reasons = []
    for pkg in ("torch", "triton"):
        then, now = _major_minor(provenance.get(pkg)), _major_minor(env.get(pkg))
        if then and now and then != now:
            reasons.append(f"measured with {pkg} {provenance.get(pkg)}, this machine has {env.get(pkg)}")
    if kind == "timed" and provenance.get("gpu") and provenance["gpu"] != env["gpu"]:
        reasons.append(f"measured on {provenance['gpu']}, this machine has {env['gpu']}")
    return "; ".join(reasons) or None


@dataclass(frozen=True)
class SkillStatus:
    """A skill's state, evidence and freshness, as every interface shows them."""

    state: str
    evidence: str                  # timed | correctness | none
    measured_on: str | None        # the GPU name, "cpu", or None when never measured
    freshness: str                 # current | stale | not re-checkable | -
    stale: str | None              # the reason when stale

    def label(self) -> str:
        """``verified · timed on NVIDIA H200 · current`` (one line)."""
        if self.evidence == "timed":
            evidence = f"timed on {self.measured_on}"
        elif self.evidence == "correctness":
            evidence = "correctness only (cpu)"
        else:
            evidence = NEVER_MEASURED
        parts = [self.state, evidence]
        if self.evidence != "none":
            parts.append(f"stale: {self.stale}" if self.freshness == "stale" else self.freshness)
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["label"] = self.label()
        return out


def skill_status(state: str, provenance: dict[str, Any], env: dict[str, str | None]) -> SkillStatus:
    kind = evidence_kind(provenance)
    if kind == "none":
        return SkillStatus(state, kind, None, "-", None)
    measured_on = provenance.get("gpu") or "cpu"
    reason = stale_reason(provenance, env)
    if reason:
        freshness = "stale"
    elif kind == "timed" and not env.get("gpu"):
        freshness = "not re-checkable (no GPU here)"
    else:
        freshness = "current"
    return SkillStatus(state, kind, measured_on, freshness, reason)
