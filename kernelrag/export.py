"""Optimization logs: written by the generate loop, read back, exported as a dataset.

A log is one JSONL file under ``settings.logs_dir``: a ``{"type": "run", ...}``
line, then one ``{"type": "round", ...}`` line per round (contracts.md). Logs hold
no secrets: the API key never reaches a result, so it never reaches a log.

The export turns verified runs into training data, one JSON object per line:

- ``{"type": "sft", ...}``: the plain prompt (rules + task) and the final,
  verified kernel, both as ``prompt``/``completion`` text and as chat ``messages``;
- ``{"type": "transcript", ...}``: the multi-turn trajectory (draft, verifier
  feedback, next draft, ...) with every round's verdict.

Standard library only.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from kernelrag.config import Settings
from kernelrag.types import ExportResult, GenerateResult, plain
from kernelrag.draft.prompts import sft_messages


def new_log_id(pattern: str, task_source: str) -> str:
    """``20250101T120000123456-relu-mul-add-1a2b3c4d``: time, pattern, task digest."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    name = re.sub(r"[^a-z0-9]+", "-", pattern.lower()).strip("-")[:40] or "unknown"
    digest = hashlib.sha1(task_source.encode()).hexdigest()[:8]
    return f"{stamp}-{name}-{digest}"


def _verdict_facts(verdict: Any) -> dict[str, Any] | None:
    if verdict is None:
        return None
    keys = ("ok", "status", "reason", "device", "gpu", "timed", "speedup_vs_eager", "speedup_vs_compile",
            "frac_roofline", "achieved_gbps", "achieved_tflops", "max_abs_err", "max_rel_err")
    d = verdict.to_dict() if hasattr(verdict, "to_dict") else dict(verdict)
    out = {k: d.get(k) for k in keys if k in d}
    ms = d.get("kernel_ms")
    out["kernel_ms"] = ms.get("median_ms") if isinstance(ms, dict) else ms
    return out


def write_log(settings: Settings, result: GenerateResult, *, task_source: str, gpu: str,
              device: str, llm_model: str | None, rounds_extra: list[dict] | None = None,
              log_id: str | None = None) -> Path:
    """Write ``result`` as an optimization log and return its path.

    ``rounds_extra[i]`` adds fields to round i's line (the LLM messages and raw answer)."""
    log_id = log_id or new_log_id(result.pattern, task_source)
    final = _verdict_facts(result.verdict) or {}
    run = {
        "type": "run", "log_id": log_id,
        "task": Path(result.task_path).name if result.task_path else "inline task",
        "task_path": result.task_path, "pattern": result.pattern, "gpu": gpu, "device": device,
        "backend": result.backend, "outcome": "ok" if result.ok else "failed", "reason": result.reason,
        "from_memory": result.from_memory, "rounds": len(result.rounds),
        "skill": result.write_back.skill, "skill_state": result.write_back.skill_state,
        "llm_model": llm_model, "llm_calls": result.cost.llm_calls,
        "prompt_tokens": result.cost.prompt_tokens, "completion_tokens": result.cost.completion_tokens,
        "seconds": round(result.cost.seconds, 3),
        "speedup_vs_eager": final.get("speedup_vs_eager"), "kernel_ms": final.get("kernel_ms"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "task_source": task_source,
    }
    lines = [run]
    for i, r in enumerate(result.rounds):
        line = {"type": "round", "log_id": log_id, "round": r.index, "drafter": r.drafter, "skill": r.skill,
                "transformations": r.transformations, "draft": r.draft,
                "verdict": plain(r.verdict), "feedback": r.feedback, "error": r.error,
                "seconds": round(r.seconds, 3)}
        if rounds_extra and i < len(rounds_extra):
            line.update(rounds_extra[i])
        lines.append(line)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    path = settings.logs_dir / f"{log_id}.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    text = "".join(json.dumps(line, default=str) + "\n" for line in lines)
    tmp.write_text(settings.scrub(text))        # no key or URL credential reaches the log or the store
    os.replace(tmp, path)
    return path


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run record, round records) of one log; ValueError when it is not a log."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not records or records[0].get("type") != "run":
        raise ValueError(f"{path} is not an optimization log (first line must have \"type\": \"run\")")
    return records[0], [r for r in records[1:] if r.get("type") == "round"]


def iter_logs(settings: Settings):
    """(path, run, rounds) for every readable log, oldest first; unreadable ones are skipped."""
    if not settings.logs_dir.is_dir():
        return
    for path in sorted(settings.logs_dir.glob("*.jsonl")):
        try:
            run, rounds = read_log(path)
        except (OSError, ValueError):
            continue
        yield path, run, rounds


def _answer(round_: dict[str, Any]) -> str:
    if round_.get("answer"):
        return round_["answer"]
    return f"```python\n{round_.get('draft', '').rstrip()}\n```" if round_.get("draft") else "(no answer)"


def _round_facts(round_: dict[str, Any]) -> dict[str, Any]:
    v = round_.get("verdict") or {}
    return {"round": round_.get("round"), "drafter": round_.get("drafter"), "ok": bool(v.get("ok")),
            "status": v.get("status") or ("draft_error" if round_.get("error") else None),
            "reason": v.get("reason") or round_.get("error"), "speedup_vs_eager": v.get("speedup_vs_eager")}


def trajectories(run: dict[str, Any], rounds: list[dict[str, Any]]) -> tuple[dict, dict]:
    """The SFT pair and the multi-turn transcript of one logged run."""
    backend = run.get("backend") or "triton"
    prompt = sft_messages(run.get("task_source", ""), backend)
    final = next((r for r in reversed(rounds) if (r.get("verdict") or {}).get("ok")), rounds[-1] if rounds else {})
    meta = {"log_id": run.get("log_id"), "task": run.get("task"), "pattern": run.get("pattern"),
            "gpu": run.get("gpu"), "backend": backend}
    completion = final.get("draft", "")
    sft = {"type": "sft", **meta, "prompt": prompt[-1]["content"], "system": prompt[0]["content"],
           "completion": completion,
           "messages": prompt + [{"role": "assistant", "content": f"```python\n{completion.rstrip()}\n```"}],
           "verdict": _round_facts(final)}
    messages = list(prompt)
    for r in rounds:
        messages.append({"role": "assistant", "content": _answer(r)})
        if (r.get("verdict") or {}).get("ok"):
            break
        if r is not rounds[-1]:
            messages.append({"role": "user", "content": "That attempt did not pass. Feedback:\n\n"
                             + (r.get("feedback") or r.get("error") or "(none)")})
    transcript = {"type": "transcript", **meta, "outcome": run.get("outcome"), "messages": messages,
                  "verdicts": [_round_facts(r) for r in rounds]}
    return sft, transcript


def export_jsonl(settings: Settings, out: Path | str | None = None, *,
                 include_failed: bool = False) -> ExportResult:
    """Write the dataset; by default only runs whose final kernel was verified (outcome ok)
    and not flagged for review. ``include_failed`` adds transcripts of failed runs (no SFT pair)."""
    out = Path(out) if out else settings.home / "exports" / "trajectories.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    read = skipped = sft_count = transcript_count = 0
    seen: set[str] = set()            # a task answered again from memory repeats its pair: keep one

    def first_time(record: dict) -> bool:
        digest = hashlib.sha1(json.dumps([record["type"], record["messages"]], sort_keys=True).encode()).hexdigest()
        if digest in seen:
            return False
        seen.add(digest)
        return True

    with open(out, "w") as handle:
        for _path, run, rounds in iter_logs(settings):
            read += 1
            verified = run.get("outcome") == "ok" and run.get("skill_state") != "needs_review"
            if not rounds or not (verified or include_failed):
                skipped += 1
                continue
            sft, transcript = trajectories(run, rounds)
            if verified and first_time(sft):
                handle.write(json.dumps(sft) + "\n")
                sft_count += 1
            if first_time(transcript):
                handle.write(json.dumps(transcript) + "\n")
                transcript_count += 1
    return ExportResult(path=str(out), sft_pairs=sft_count, transcripts=transcript_count,
                        runs_read=read, runs_skipped=skipped)
