"""``kernelrag ask "question"``: an answer citing the knowledge store, graph and skills."""
from __future__ import annotations

import argparse
import json
import sys

from kernelrag.api import KernelRAG

EXAMPLE = """examples:
  kernelrag ask "how do I avoid shared memory bank conflicts"
  kernelrag ask "when is split-k worth it for a matmul" -k 8 --json

With an LLM endpoint configured (KERNELRAG_LLM_BASE_URL) the answer is written by the
LLM and cites passages as [n]; without one you get the best passages, graph suggestions
and matching skills, labelled "retrieved, not written by an LLM"."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("question", help="the question, in quotes")
    parser.add_argument("-k", type=int, default=5, help="passages to retrieve (default: 5)")
    parser.add_argument("--json", action="store_true", help="print the AskResult as JSON")


def run(args: argparse.Namespace) -> int:
    if args.k < 1:
        print(f"kernelrag ask: -k {args.k} must be at least 1", file=sys.stderr)
        return 2
    from kernelrag.api import STORE_FAILED

    result = KernelRAG().ask(args.question, k=args.k)
    failed = 1 if any(n.startswith(STORE_FAILED) for n in result.notes) else 0   # the store could not be read
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return failed
    print(result.answer)
    if result.mode == "llm" and result.citations:
        print("\nSources:")
        for c in result.citations:
            print(f"  {c.label()}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if result.mode == "llm":
        c = result.cost
        print(f"\n({c.llm_calls} LLM call, {c.prompt_tokens}+{c.completion_tokens} tokens, {c.seconds:.1f} s)",
              file=sys.stderr)
    return failed
