"""Variant A/B on a GPU: drafts of a task verified side by side in one session.

Each row names a task (``path``) and one of its drafts (``candidate``, with the ``variants``
and ``transformations`` it stands for). ``verify_rows`` verifies every row whose draft
lowered through one ``VerifySession``, so all ratios are measured in one run against the same
eager anchor, fills each row with its verdict's figures, and returns one evidence record a
verdict for the reasoning graph, so the generate loop's ranking learns the outcome
(``bench/conv_variants.py``: the conv layouts; ``bench/row_split_ab.py``: the split-row
GEMM epilogue against the product then its rows).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Callable

VERDICT_FIELDS = ("status", "reason", "speedup_vs_eager", "speedup_vs_compile", "frac_roofline",
                  "achieved_tflops", "precision", "compile_source")
TIMES = ("kernel_ms", "eager_ms", "compile_ms")


def verify_rows(rows: list[dict], device: str, log_prefix: str, detail: Callable[[dict], str]) -> list[dict]:
    """Verify the rows whose draft lowered (``draft_ok``); each gets its verdict's fields, and
    median, IQR and trial count per timing (``kernel_ms``, ``kernel_iqr_ms``, ``kernel_trials``...).
    Returns the evidence records (``log_id`` ``<log_prefix>/<task>/<variants>``, ``detail(row)``)."""
    from kernelrag.memory.graph_query import outcome_from_verdict
    from kernelrag.memory.writeback import evidence_record
    from kernelrag.patterns import op_pattern
    from kernelrag.verify import VerifySession

    todo = [r for r in rows if r["draft_ok"]]
    with VerifySession(device=device) as session:
        for r in todo:
            session.prefetch(Path(r["path"]).read_text())
        verdicts = session.verify_pairs([(r["path"], r["candidate"]) for r in todo], errors="return")
    records = []
    for row, v in zip(todo, verdicts):
        if isinstance(v, Exception):
            row.update(status="verify-raised", error=str(v)[:300])
            continue
        d = v.to_dict()
        row.update({k: d.get(k) for k in VERDICT_FIELDS})
        for key in TIMES:
            t = d.get(key) or {}
            row[key] = t.get("median_ms") if isinstance(t, dict) else t
            row[key.replace("_ms", "_iqr_ms")] = t.get("iqr_ms") if isinstance(t, dict) else None
            row[key.replace("_ms", "_trials")] = t.get("trials") if isinstance(t, dict) else None
        outcome = outcome_from_verdict(d)
        if outcome is not None and row.get("transformations"):
            records.append(evidence_record(d, pattern=op_pattern(row["path"]).signature,
                                           transformations=row["transformations"], outcome=outcome,
                                           log_id=f"{log_prefix}/{row['task']}/{'_'.join(row['variants'])}",
                                           detail=detail(row), variant="_".join(row["variants"])))
    return records


def arguments(description: str, only: str) -> argparse.ArgumentParser:
    """The options every A/B script takes: ``--device``, ``--out``, ``--no-record``, ``--only``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-record", action="store_true", help="do not write the evidence into the reasoning graph")
    ap.add_argument("--only", nargs="*", default=[], help=f"task names (default: {only})")
    return ap


def report_head(device: str, t0: float, rows: list[dict]) -> dict:
    """A results file's common fields: when, where (machine, versions, GPU), how long, the rows."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": device,
            "machine": {"platform": platform.platform(), "python": platform.python_version()},
            "versions": versions(), "wall_s": round(time.perf_counter() - t0, 1), "rows": rows}


def write_report(report: dict, out: Path) -> None:
    """The results file, then one line a row: task, variants, status, kernel time, x torch.compile."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    for r in report["rows"]:
        print(f"{r['task']:<34} {'+'.join(r['variants']):<28} {r.get('status', r.get('reason', ''))!s:<12} "
              f"kernel {r.get('kernel_ms') or 0:7.3f} ms  compile x{r.get('speedup_vs_compile') or 0:.2f}")


def versions() -> dict:
    import torch
    import triton

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "triton": triton.__version__, "gpu": gpu}
