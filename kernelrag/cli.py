"""The ``kernelrag`` command line: a thin layer over the facade.

Each command lives in ``kernelrag/commands/<name>.py`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Only the chosen command's
module is imported, so ``kernelrag --help`` stays fast.

Every command calls the facade (``kernelrag.api.KernelRAG``) only, except ``verify``
and ``bench``: they call ``kernelrag.verify`` and ``kernelrag.bench`` directly, because
they must run on a bare GPU machine (torch, triton, numpy and networkx only).

Exit codes, the same for every command: 0 success; 1 the job ran and failed (a
kernel rejected, some files not ingested, the store or the LLM unreachable, a file
that cannot be written); 2 bad usage (an unknown command, flag or setting, a bad
value, a missing input file, ``--device cuda`` without a GPU), reported before any
work is done. A ``KernelRAGError`` carries its code (``exit_code``).
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
        if getattr(args, "device", None) == "cuda":
            _require_cuda(args.command)
        code = int(_load(args.command).run(args) or 0)
        return code if code in (EXIT_OK, EXIT_FAILED, EXIT_USAGE) else EXIT_FAILED
    except KernelRAGError as exc:
        print(f"kernelrag {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code if exc.exit_code in (EXIT_FAILED, EXIT_USAGE) else EXIT_FAILED
    except OSError as exc:               # a file or folder that cannot be read or written: one line
        if isinstance(exc, BrokenPipeError):
            return _broken_pipe()
        where = f" {exc.filename}" if exc.filename else ""
        print(f"kernelrag {args.command}: error: cannot access{where}: {exc.strerror or exc}; "
              "check the path and its permissions (state lives in KERNELRAG_HOME)", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _broken_pipe() -> int:
    """Output piped into `head` and the reader left: not an error."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def _require_cuda(command: str) -> None:
    """``--device cuda`` on a machine without a usable GPU is bad usage: say so before any work."""
    from kernelrag.errors import ConfigError

    try:
        import torch
    except ImportError:
        raise ConfigError("--device cuda needs torch with CUDA, and torch is not installed; "
                          "use --device cpu or auto") from None
    if not torch.cuda.is_available():
        raise ConfigError(f"--device cuda: no CUDA GPU is visible to this process (torch {torch.__version__}, "
                          f"CUDA build {torch.version.cuda or 'none'}); use --device cpu or auto for {command}")


if __name__ == "__main__":
    raise SystemExit(main())
