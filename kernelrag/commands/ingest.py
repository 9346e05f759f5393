"""``kernelrag ingest PATH...``: add documents to the knowledge store."""
from __future__ import annotations

import argparse
import json
import sys

from kernelrag.api import KINDS, KernelRAG

EXAMPLE = """examples:
  kernelrag ingest corpus/ skills/
  kernelrag ingest docs/cuda-guide.html.gz --kind guide
  kernelrag ingest corpus/ --prune --json      # also drop chunks of deleted files

Reads Markdown, reStructuredText, text, HTML, PDF, source code (.py .cu .cuh .h .cpp .ptx),
any of them .gz-compressed, optimization logs (.jsonl) and skill folders. Images, CSS,
JS, fonts and search indexes are skipped and counted. Unchanged files cost nothing.
Exit code 1 when any file could not be ingested (each is named with the reason)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to ingest")
    parser.add_argument("--prune", action="store_true",
                        help="remove chunks of files under PATH that no longer exist")
    parser.add_argument("--kind", choices=KINDS, help="doc kind for every file (default: front matter or path)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def run(args: argparse.Namespace) -> int:
    report = KernelRAG().ingest(args.paths, prune=args.prune, progress=not args.no_progress, kind=args.kind)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    if not report.ok:
        print(f"kernelrag ingest: {report.files_failed} file(s) not ingested; fix them and re-run "
              "(unchanged files are not re-embedded)", file=sys.stderr)
    return 0 if report.ok else 1
