"""``kernelrag generate TASK.py``: draft, verify and iterate a kernel for a KernelBench task."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelrag.api import KernelRAG
from kernelrag.errors import TaskError

EXAMPLE = """examples:
  kernelrag generate bench/tasks/softmax.py
  kernelrag generate my_task.py --rounds 6 --device cuda --out my_kernel.py
  kernelrag generate my_task.py --json > result.json

Memory first (a verified skill for the same op pattern answers without an LLM), then
rounds of draft -> verify -> feedback: drafts come from the LLM when KERNELRAG_LLM_BASE_URL
is set, else from the skill library and the elementwise generator. What was learned is
written back (skill, graph evidence, optimization log). Exit code 1 when no round verified."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("task", help="KernelBench task file (class Model, get_inputs, get_init_inputs)")
    parser.add_argument("--backend", choices=("triton", "cuda"), default="triton", help="kernel language")
    parser.add_argument("--rounds", type=int, default=None, help="most rounds (default: settings.max_rounds)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None,
                        help="where to verify (default: settings.device)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory lookup; always draft")
    parser.add_argument("--out", help="write the final kernel to this file")
    parser.add_argument("--json", action="store_true", help="print the GenerateResult as JSON")


def run(args: argparse.Namespace) -> int:
    if args.rounds is not None and args.rounds < 1:
        print(f"kernelrag generate: --rounds {args.rounds} must be at least 1", file=sys.stderr)
        return 2
    kr = KernelRAG()
    try:
        task = kr.task(Path(args.task))
    except TaskError:
        print(f"kernelrag generate: task file {args.task!r} does not exist", file=sys.stderr)
        return 2

    def progress(r) -> None:
        if not args.json:
            status = getattr(r.verdict, "summary", lambda: r.error or "no verdict")()
            print(f"round {r.index} [{r.drafter}{' ' + r.skill if r.skill else ''}]: {status}",
                  file=sys.stderr, flush=True)

    result = kr.generate(task, backend=args.backend, max_rounds=args.rounds,
                                  device=args.device, on_round=progress, use_memory=not args.no_memory)
    out_failed = None
    if args.out and result.source:
        try:
            Path(args.out).write_text(result.source)
        except OSError as exc:
            out_failed, args.out = f"--out {args.out}: {exc.strerror or exc}", None
            result.write_back.failed.append("out")
            print(f"kernelrag generate: cannot write {out_failed}; the kernel is printed instead", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.summary())
        wb = result.write_back
        if wb.skill:
            print(f"  skill written: {wb.skill} ({wb.skill_state}) at {wb.skill_path}")
        if wb.log_path:
            print(f"  log: {wb.log_path}" + (" (ingested)" if wb.ingested else ""))
        print(f"  graph records: {wb.graph_records}")
        for note in wb.notes:
            print(f"  note: {note}")
        if args.out and result.source:
            print(f"  kernel written to {args.out}")
        elif result.ok and wb.failed:        # memory could not keep it: the kernel is not lost
            print(f"  write-back failed ({', '.join(wb.failed)}); the verified kernel follows "
                  "(or pass --out FILE)\n")
            print(result.source)
    return 0 if result.ok else 1
