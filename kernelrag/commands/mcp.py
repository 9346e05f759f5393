"""``kernelrag mcp``: serve kernelrag's tools to an agent over MCP (stdio or streamable HTTP)."""
from __future__ import annotations

import argparse
import os
import sys

from kernelrag.api import KernelRAG

EXAMPLE = """examples:
  kernelrag mcp                                   # stdio: the agent starts this as a subprocess
  kernelrag mcp --transport http --port 8765      # streamable HTTP at http://127.0.0.1:8765/mcp

tools: search_docs, suggest_transformations, find_skills, get_skill, verify_kernel,
generate_kernel, record_outcome. An agent's MCP config for stdio:
  {"mcpServers": {"kernelrag": {"command": "kernelrag", "args": ["mcp"],
                                "env": {"KERNELRAG_HOME": "/home/me/.kernelrag"}}}}"""


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number; give 1-65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range; give 1-65535")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                        help="stdio (default) or http (streamable HTTP)")
    parser.add_argument("--host", default="127.0.0.1", help="address for --transport http (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8765, help="port for --transport http (default: 8765)")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    KernelRAG()                           # bad settings fail here, before a client connects
    if args.transport == "http":
        print(f"kernelrag MCP server: http://{args.host}:{args.port}/mcp (stop with Ctrl-C)", file=sys.stderr)
    from kernelrag.mcp_server import serve

    serve(args.transport, host=args.host, port=args.port)
    return 0
