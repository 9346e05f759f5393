"""``kernelrag graph suggest|why|show|failures|export``: the reasoning graph."""
from __future__ import annotations

import argparse
import json
import sys

from kernelrag.api import KernelRAG
from kernelrag.types import plain

EXAMPLE = """examples:
  kernelrag graph suggest tasks/softmax.py            # trace the task, rank transformations
  kernelrag graph suggest "softmax[dim=-1]" --gpu h200
  kernelrag graph why "softmax[dim=-1]" online_softmax
  kernelrag graph show                                # every pattern with its evidence counts
  kernelrag graph failures "matmul>add>relu"
  kernelrag graph export graph.dot --format dot

Scores: Wilson lower bound of the success rate x geometric-mean speedup against the
better of eager and torch.compile; transformations seen only on related patterns
are marked similar:<pattern> and discounted."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    p = sub.add_parser("suggest", help="transformations to try for a task or pattern, ranked by evidence")
    p.add_argument("target", metavar="TASK_OR_PATTERN", help="a KernelBench task file or an op pattern")
    p.add_argument("--gpu", default=None, help="only evidence from GPUs whose name contains this")
    p.add_argument("-k", type=int, default=8)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("why", help="all evidence for one transformation on one pattern")
    p.add_argument("pattern", metavar="PATTERN")
    p.add_argument("transformation", metavar="TRANSFORMATION")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("show", help="patterns in the graph, or one pattern's transformations")
    p.add_argument("pattern", metavar="PATTERN", nargs="?")
    p.add_argument("--gpu", default=None)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("failures", help="what failed or lost on a pattern (negative knowledge)")
    p.add_argument("pattern", metavar="PATTERN")
    p.add_argument("--gpu", default=None)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("export", help="write the graph as GraphML, DOT or JSON")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--format", choices=("graphml", "dot", "json"), default=None,
                   help="default: from the file suffix, else graphml")


def _print_json(data) -> None:
    print(json.dumps(plain(data), indent=2, default=str))


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if not action:
        print("kernelrag graph: give an action: suggest, why, show, failures, export "
              "(see kernelrag graph --help)", file=sys.stderr)
        return 2
    kr = KernelRAG()
    for warning in kr.graph_warnings:
        print(f"warning: {warning}", file=sys.stderr)

    if action == "suggest":
        pattern = kr.as_pattern(args.target)
        if not pattern.known:
            print(f"kernelrag graph: the task's op pattern is unknown: {pattern.reason}", file=sys.stderr)
            return 1
        rows = kr.suggestions(pattern, gpu=args.gpu, k=args.k)
        if args.json:
            _print_json({"pattern": pattern.signature, "category": pattern.category, "suggestions": rows,
                         "skills": kr.skills_for(pattern)})
            return 0
        print(f"pattern {pattern.signature} ({pattern.category})")
        if not rows:
            print("  no transformation has succeeded on this pattern or related ones yet")
        for s in rows:
            print("  " + s.line())
            if s.log_ids:
                print("      evidence: " + ", ".join(s.log_ids[:4]) + (" ..." if len(s.log_ids) > 4 else ""))
        lost = kr.borrowed_failures(pattern, gpu=args.gpu)
        if lost:
            print("tried and lost (negative evidence):")
            for other, f in lost[:6]:
                print("  " + f.line() + (f"  [on similar pattern {other}]" if other else ""))
        skills = kr.skills_for(pattern)
        if skills:
            print("skills implementing it: " + ", ".join(skills))
        return 0

    if action == "why":
        ev = kr.why(args.pattern, args.transformation)
        if args.json:
            _print_json(ev)
        else:
            print(ev.summary())
        return 0

    if action == "failures":
        rows = kr.failures(args.pattern, gpu=args.gpu)
        if args.json:
            _print_json(rows)
        else:
            print("\n".join(f.line() for f in rows) or "no failures recorded")
        return 0

    if action == "show":
        if args.pattern:
            pattern = kr.as_pattern(args.pattern)
            rows = kr.graph_table(pattern, gpu=args.gpu)
            if args.json:
                _print_json({"pattern": pattern.signature, "transformations": rows,
                             "skills": kr.skills_for(pattern)})
                return 0
            print(f"pattern {pattern.signature}")
            print("\n".join("  " + r.line() for r in rows) or "  no evidence recorded")
            return 0
        overview = kr.graph_overview(gpu=args.gpu)
        if args.json:
            _print_json({"path": overview["path"], "patterns": overview["patterns"]})
            return 0
        print(f"reasoning graph {overview['path']}{'' if overview['written'] else ' (not written yet; seeded)'}")
        for o in overview["patterns"]:
            print(f"  {o['pattern']:36s} {o['transformations']:2d} transformations "
                  f"{o['attempts']:4d} attempts  best {o['best'] or '-'}  skills {', '.join(o['skills']) or '-'}")
        return 0

    path, fmt = kr.export_graph(args.path, args.format)
    print(f"wrote {path} ({fmt})")
    return 0
