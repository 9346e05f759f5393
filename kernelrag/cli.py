"""The ``kernelrag`` command line: a thin layer over the facade.

Each command lives in ``kernelrag/commands/<name>.py`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Only the chosen command's
module is imported, so ``kernelrag --help`` stays fast.

Every command calls the facade (``kernelrag.api.KernelRAG``) only, except ``verify``
and ``bench``: they call ``kernelrag.verify`` and ``kernelrag.bench`` directly, because
they must run on a bare GPU machine (torch, triton, numpy and networkx only).

Exit codes: 0 success, 1 the job ran but failed (a kernel rejected, some files
not ingested), 2 bad usage or settings.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from kernelrag import __version__
from kernelrag.errors import KernelRAGError

# name -> one-line help. Order is the order shown by --help.
COMMANDS: dict[str, str] = {
    "ingest": "ingest documents into the knowledge store",
    "search": "hybrid search of the knowledge store, with citations",
    "ask": "answer a question from the knowledge store, graph and skills",
    "generate": "draft, verify and iterate a kernel for a KernelBench task",
    "verify": "verify candidate kernels against a KernelBench task (several: batch mode)",
    "skills": "list, show, verify, approve or retire skills",
    "graph": "query the reasoning graph of transformations",
    "export": "export verified optimization trajectories as a dataset",
    "bench": "run the benchmark suite (generate + verify every task)",
    "ui": "start the Gradio chat UI",
    "mcp": "serve kernelrag's tools over MCP (stdio or HTTP)",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _load(name: str):
    return importlib.import_module(f"kernelrag.commands.{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelrag",
        description="Retrieval-augmented GPU-kernel assistant with a verified skill memory.",
        epilog="example: kernelrag search \"how do I avoid shared memory bank conflicts\"",
    )
    parser.add_argument("--version", action="version", version=f"kernelrag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            _load(name).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        valid = ", ".join(COMMANDS)
        print(f"kernelrag: unknown command {command!r}; valid commands: {valid}", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(_load(args.command).run(args) or 0)
    except KernelRAGError as exc:
        print(f"kernelrag {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:          # output piped into `head` and the reader left: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
