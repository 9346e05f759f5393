"""The split-row GEMM epilogue against the product then its rows, side by side on a GPU.

Each suite task whose GEMM region reduces rows across tiles (``lower/gemm_rows.py``: the lm
head's cross-entropy, a linear layer's logsumexp) is lowered in its default variant (per-tile
row partials in the GEMM's epilogue, a combine kernel: the product never written) and in
``rows_after`` (the product written once, the row-wise template's kernel over it). Both are
verified through one ``VerifySession`` (``kernelrag.bench.variants``), so the ratio is measured
in one run against the same eager anchor. Writes a results file and one evidence record per
verdict into the reasoning graph of ``$KERNELRAG_HOME`` (``--no-record``: not), so the generate
loop's ranking learns which of the two wins.

    PYTHONPATH=. python3 bench/row_split_ab.py --device cuda --out bench/results/row-split-h200-<date>.json
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelrag.bench.variants import arguments, report_head, verify_rows, write_report  # noqa: E402
from kernelrag.config import load_settings  # noqa: E402
from kernelrag.draft.lower.lowering import lower, plan_task, variant_choices  # noqa: E402
from kernelrag.draft.lower.protocol import Region  # noqa: E402
from kernelrag.memory.graph import ReasoningGraph  # noqa: E402
from kernelrag.memory.writeback import record_evidence  # noqa: E402


def split_tasks(folder: Path) -> list[Path]:
    """The tasks in ``folder`` with a GEMM region that reduces rows across tiles."""
    out = []
    for task in sorted(folder.glob("*.py")):
        try:
            _, steps = plan_task(task.read_text())
        except Exception:       # a task the lowering does not place has nothing to compare
            continue
        if any(isinstance(s, Region) and s.template.name == "gemm" and s.state.get("split") for s in steps):
            out.append(task)
    return out


def drafts(tasks: list[Path], folder: Path) -> list[dict]:
    """Two rows a task: its default combination (the split epilogue) and the same with ``rows_after``."""
    rows = []
    for task in tasks:
        source = task.read_text()
        combos = variant_choices(source)        # the default, then each with one region's variant changed
        for combo in (combos[0], next(c for c in combos if "rows_after" in c)):
            draft = lower(source, task.stem, combo)
            row = {"task": task.stem, "path": str(task), "variants": list(combo), "draft_ok": draft.ok,
                   "split": "rows_after" not in combo}
            if not draft.ok:
                rows.append({**row, "reason": draft.reason})
                continue
            candidate = folder / f"{task.stem}__{'_'.join(combo)}.py"
            candidate.write_text(draft.source)
            rows.append({**row, "candidate": str(candidate), "transformations": draft.transformations})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__.splitlines()[0], "every task with split rows")
    ap.add_argument("--tasks", type=Path, default=ROOT / "bench" / "tasks", help="folder of tasks")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tasks = [t for t in split_tasks(args.tasks) if not args.only or t.stem in args.only]
    rows = drafts(tasks, Path(tempfile.mkdtemp(prefix="row-split-")))
    records = verify_rows(rows, args.device, "row-split",
                          lambda r: f"split-row epilogue A/B: {'split' if r['split'] else 'rows_after'} on {r['task']}")
    if records and not args.no_record:
        record_evidence(ReasoningGraph(load_settings()), records)
    timed = {(r["task"], r["split"]): r["kernel_ms"] for r in rows if r.get("kernel_ms")}
    ratios = {task: timed[(task, False)] / ms for (task, split), ms in timed.items()   # >1: the split is faster
              if split and (task, False) in timed}
    report = {**report_head(args.device, t0, rows), "split_speedup": ratios, "evidence_records": len(records)}
    write_report(report, args.out)
    print(f"rows_after / split, kernel time ratio (>1: the split epilogue faster): {ratios}")
    print(f"wrote {args.out} ({report['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
