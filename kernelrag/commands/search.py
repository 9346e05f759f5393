"""``kernelrag search "query"``: hybrid search of the knowledge store, with citations."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap

from kernelrag.api import KINDS, KernelRAG, MODES

EXAMPLE = """examples:
  kernelrag search "how do I avoid shared memory bank conflicts"
  kernelrag search "ldmatrix" --mode bm25 -k 3
  kernelrag search "online softmax" --kind skill --json

hybrid = dense embeddings (all-MiniLM-L6-v2) + BM25, fused by reciprocal rank."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("query", help="what to look for")
    parser.add_argument("-k", type=int, default=None, help="number of hits (default: settings.search_k)")
    parser.add_argument("--kind", choices=KINDS, help="only chunks of this doc kind")
    parser.add_argument("--mode", choices=MODES, default="hybrid", help="retrieval mode (default: hybrid)")
    parser.add_argument("--json", action="store_true", help="print hits as JSON")


def run(args: argparse.Namespace) -> int:
    kr = KernelRAG()
    k = args.k if args.k is not None else kr.settings.search_k
    if k < 1:
        print(f"kernelrag search: -k {k} must be at least 1", file=sys.stderr)
        return 2
    hits = kr.hits(args.query, k=k, kind=args.kind, mode=args.mode)
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], indent=2))
        return 0
    if not hits:
        print("no hits; is the store empty? ingest documents with: kernelrag ingest corpus/", file=sys.stderr)
        return 0
    for n, hit in enumerate(hits, 1):
        print(f"[{n}] {hit.citation()}  ({hit.kind}, score {hit.score:.4f})")
        body = " ".join(hit.text.split())
        print(textwrap.indent(textwrap.shorten(body, 300, placeholder=" ..."), "    "))
    return 0
