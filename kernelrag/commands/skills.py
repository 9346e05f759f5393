"""``kernelrag skills list|show|verify|approve|retire|promote``: the skill library."""
from __future__ import annotations

import argparse
import json
import sys

from kernelrag.api import KernelRAG

EXAMPLE = """examples:
  kernelrag skills list
  kernelrag skills show softmax_online
  kernelrag skills verify softmax_online --device cpu
  kernelrag skills approve my_learned_softmax
  kernelrag skills promote my_learned_softmax      # copy a learned skill into skills/

Seed skills (skills/) are read-only: approve/retire on one records an override
under $KERNELRAG_HOME. Their measured numbers come from
`python3 -m kernelrag.bench.measure_skills` run on a GPU.

STATUS is state · evidence · freshness (the same words everywhere):
  state      draft (never verified), verified (passed the verifier), approved (verified
             and accepted by a person), needs_review (numbers implausible: waits for a
             person), retired (no longer offered)
  evidence   timed on <GPU> | correctness only (cpu) | never measured
  freshness  current | stale: <why> (the GPU or torch/triton version the evidence
             depends on differs here) | not re-checkable (GPU timing, no GPU here)"""

ACTIONS = ("list", "show", "verify", "approve", "retire", "promote")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    p = sub.add_parser("list", help="all skills with state, staleness and best speedups")
    p.add_argument("--active", action="store_true", help="hide retired skills")
    p.add_argument("--json", action="store_true")
    for name, text in (("show", "one skill's metadata, provenance and files"),
                       ("approve", "mark a verified skill approved by a person"),
                       ("retire", "stop offering a skill"),
                       ("promote", "copy a learned skill into the seed skills folder")):
        p = sub.add_parser(name, help=text)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--json", action="store_true")
        if name == "show":
            p.add_argument("--source", action="store_true", help="also print kernel.py")
        if name == "promote":
            p.add_argument("--dest", default=None, help="destination root (default: the seed skills folder)")
    p = sub.add_parser("verify", help="run the verifier on a skill's kernel")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None)
    p.add_argument("--no-write", action="store_true", help="do not record the result in a learned skill")
    p.add_argument("--json", action="store_true")


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _list(kr: KernelRAG, args) -> int:
    rows = kr.skill_rows(include_retired=not args.active)
    problems = kr.skill_problems
    if args.json:
        print(json.dumps({"skills": rows, "problems": problems}, indent=2))
        return 0
    print(f"{'NAME':28s} {'PATTERN':32s} {'BACKEND':7s} {'EAGER':>7s} {'COMPILE':>7s}  STATUS")
    for r in rows:
        src = "" if r["source"] == "seed" else " (learned)"
        print(f"{r['name'] + src:28s} {r['pattern']:32s} {r['backend']:7s} "
              f"{_fmt(r['speedup_vs_eager']):>7s} {_fmt(r['speedup_vs_compile']):>7s}  {r['status']}")
    print(f"{len(rows)} skills")
    for problem in problems:
        print(f"warning: {problem}")
    return 0


def _show(kr: KernelRAG, args) -> int:
    s = kr.skill(args.name)
    data = kr.skill_detail(args.name)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"{s.name}  ({s.source}, {s.review_state})\n  {s.summary}")
    for key in ("pattern", "category", "backend", "transformations", "dtypes", "shapes", "tolerance"):
        print(f"  {key:16s} {data[key]}")
    print(f"  {'path':16s} {s.path}")
    print(f"  {'status':16s} {kr.library.status(s).label()}")
    if s.provenance:
        print("  provenance:")
        for k, v in s.provenance.items():
            print(f"    {k:20s} {v}")
    for alt in data["alternatives"]:
        print(f"  alternative      {alt}")
    if args.source:
        print("\n# kernel.py\n" + s.kernel_source())
    return 0


def _verify(kr: KernelRAG, args) -> int:
    v, note = kr.verify_skill(args.name, device=args.device, write=not args.no_write)
    if args.json:
        print(json.dumps({"skill": args.name, "verdict": v.to_dict(), "note": note}, indent=2, default=str))
    else:
        print(f"{args.name}: {v.summary()}")
        if note:
            print(note)
    return 0 if v.ok else 1


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "action", None):
        print(f"kernelrag skills: give an action: {', '.join(ACTIONS)} (see kernelrag skills --help)",
              file=sys.stderr)
        return 2
    kr = KernelRAG()
    if args.action == "list":
        return _list(kr, args)
    if args.action == "show":
        return _show(kr, args)
    if args.action == "verify":
        return _verify(kr, args)
    if args.action == "promote":
        target = kr.promote(args.name, dest=args.dest)
        out = {"skill": args.name, "path": str(target)}
    else:
        skill = kr.approve(args.name) if args.action == "approve" else kr.retire(args.name)
        out = {"skill": skill.name, "state": skill.review_state, "source": skill.source}
    print(json.dumps(out) if args.json else "  ".join(f"{k}: {v}" for k, v in out.items()))
    return 0
