"""``kernelrag ui``: the Gradio chat UI (chat with citations, generate, skills, settings)."""
from __future__ import annotations

import argparse
import os
import sys

from kernelrag.api import KernelRAG

EXAMPLE = """examples:
  kernelrag ui                                   # http://127.0.0.1:7860
  kernelrag ui --port 8080 --auth alice:s3cret   # ask for a login

It listens on loopback unless --host says otherwise; on any other address use --auth.
An LLM endpoint (base URL, model, key) can be set in the Settings tab: the key stays in
this process's memory only. Without one everything works offline and says so."""


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number; give 1-65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range; give 1-65535")
    return port


def _auth(text: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise argparse.ArgumentTypeError("--auth must be USER:PASSWORD, both non-empty (e.g. --auth alice:s3cret)")
    return user, password


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=7860, help="port (default: 7860)")
    parser.add_argument("--auth", type=_auth, default=None, metavar="USER:PASSWORD",
                        help="require this login")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None,
                        help="where kernels are verified (default: settings.device)")


def run(args: argparse.Namespace) -> int:
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"      # before gradio is imported
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    api = KernelRAG(device=args.device)          # bad settings fail here, before the server starts
    if args.host not in ("127.0.0.1", "localhost", "::1") and args.auth is None:
        print(f"warning: listening on {args.host} without --auth: anyone who can reach it can use it",
              file=sys.stderr)
    from kernelrag.ui.app import launch

    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"kernelrag UI: http://{shown}:{args.port}/ (stop with Ctrl-C)", file=sys.stderr)
    try:
        launch(host=args.host, port=args.port, auth=args.auth, api=api)
    except OSError as exc:                 # the port is taken, or the address is not this machine's
        print(f"kernelrag ui: error: cannot serve on {args.host}:{args.port}: {exc}; "
              "pick another with --port or --host", file=sys.stderr)
        return 1
    return 0
