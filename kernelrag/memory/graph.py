"""The reasoning graph: which transformations worked on which op patterns, where.

Nodes ``pattern:<signature>``, ``transformation:<id>`` (the vocabulary in
``kernelrag/memory/data/transformations.toml``), ``skill:<name>`` and ``gpu:<name>``.
Every attempt is one record (pattern, transformations, gpu, dtype, regime,
outcome, speedups vs eager and torch.compile, versions, date, log id, kernel
hash); a record of the same kernel in the same environment (``evidence_key``)
updates the earlier one and counts its ``verifications``, so one kernel verified
three times is one success, not three. Each record is
stored on each ``pattern -> transformation`` edge it used, and the per-(gpu,
dtype, size class) aggregates are computed from the records when asked for.
Skills add ``skill -implements-> pattern`` and ``skill -uses-> transformation``.

Persistence: node-link JSON at ``settings.graph_path``, written atomically
(temp file + os.replace) under a file lock; ``record_outcome`` re-reads the file
under the lock before applying, so concurrent writers never lose an update.
A missing file is seeded from the shipped evidence (``skills/evidence.jsonl``,
written by ``kernelrag.bench.measure_skills`` from real runs) and the seed skills.

Imports only the standard library and networkx: it runs on the GPU machine.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from kernelrag.config import Settings, load_settings
from kernelrag.errors import GraphError
from kernelrag.memory.graph_export import export
from kernelrag.memory.graph_query import (OUTCOMES, Evidence, Failure, Suggestion, aggregate, evidence,
                                   failure, gpu_matches, outcome_from_verdict, suggestion)
from kernelrag.memory.skills import SkillLibrary
from kernelrag.memory.storage import (VOCABULARY_PATH, atomic_write_text, file_lock, load_vocabulary, now_utc,
                                      write_text_or_raise)
from kernelrag.patterns import OpPattern, category_of, heavy_ops, similarity, split_ops

FORMAT = "kernelrag-graph"
__all__ = ["ReasoningGraph", "Suggestion", "Evidence", "Failure", "load_vocabulary",
           "outcome_from_verdict", "OUTCOMES", "atomic_write_text", "file_lock", "now_utc"]


def _rid(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "rid"}
    return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def evidence_key(record: dict[str, Any]) -> tuple | None:
    """What makes two records the same evidence: one kernel (content hash) on one pattern,
    GPU, dtype and size class, under one torch and triton. None for records without a
    kernel hash (seed evidence, outcomes reported by hand): each of those counts."""
    if not record.get("kernel_hash"):
        return None
    versions = record.get("versions") or {}
    return (record["pattern"], tuple(record["transformations"]), record["kernel_hash"], record.get("gpu"),
            record.get("dtype"), (record.get("regime") or {}).get("size_class"), versions.get("torch"),
            versions.get("triton"))


def kernel_hash(source: str) -> str:
    """The content hash that identifies one kernel in the evidence."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _signature(pattern: "str | OpPattern") -> str:
    if isinstance(pattern, OpPattern):
        if not pattern.known:
            raise GraphError(f"the task's op pattern is unknown ({pattern.reason}); nothing can be "
                             "recorded or suggested for it; check pattern.known before recording", usage=True)
        return pattern.signature
    ops = split_ops(str(pattern))
    if not ops or ops == ["unknown"]:
        raise GraphError(f"bad op pattern {pattern!r}; give ops joined by '>', e.g. 'matmul>add>relu'", usage=True)
    return ">".join(ops)


def _add_record(records: list[dict[str, Any]], record: dict[str, Any]) -> None:
    """Append ``record``, or update the record of the same evidence (``evidence_key``):
    re-verifying one kernel in one environment is one piece of evidence, not another success."""
    key = evidence_key(record)
    if key is not None:
        for i, old in enumerate(records):
            if evidence_key(old) == key:
                records[i] = {**record, "verifications": int(old.get("verifications") or 1) + 1,
                              "first_date": old.get("first_date") or old.get("date")}
                return
    records.append(record)


class ReasoningGraph:
    """The persistent graph of patterns, transformations, skills and GPUs."""

    def __init__(self, settings: "Settings | None" = None, *, path: "str | Path | None" = None,
                 seed_dir: "str | Path | None" = None, with_skills: bool = True):
        if settings is None:
            settings = load_settings()
        self.settings = settings
        self.path = Path(path) if path is not None else Path(settings.graph_path)
        self.seed_dir = Path(seed_dir) if seed_dir is not None else Path(settings.seed_skills_dir)
        self.with_skills = with_skills
        self.vocabulary = load_vocabulary()
        self.warnings: list[str] = []
        self.g = self._load()

    # ------------------------------------------------------------------ storage
    def _empty(self):
        import networkx as nx

        g = nx.DiGraph(format=FORMAT, version=1)
        self._add_vocabulary(g)
        return g

    def _add_vocabulary(self, g) -> None:
        for tid, info in self.vocabulary.items():
            attrs = {k: v for k, v in info.items() if k != "id"}    # "id" is the node-link key
            g.add_node(f"transformation:{tid}", kind="transformation", tid=tid, **attrs)

    def _load(self):
        if not self.path.exists():
            g = self._empty()
            self._merge_seed(g)
            return g
        raw = self.path.read_bytes()
        try:
            data = json.loads(raw)
            if data.get("graph", {}).get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file (graph.format is missing)")
            g = self._from_node_link(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            backup = self._backup_corrupt(raw)
            raise GraphError(
                f"the reasoning graph file {self.path} is corrupt ({str(exc)[:200]}); a copy is kept at "
                f"{backup}. Delete {self.path} to rebuild it from the shipped evidence "
                f"({self.seed_dir / 'evidence.jsonl'}), or repair it from the copy") from None
        self._add_vocabulary(g)                         # the vocabulary may have grown
        self._merge_seed(g)
        return g

    def _backup_corrupt(self, raw: bytes) -> Path:
        for old in sorted(self.path.parent.glob(self.path.name + ".corrupt-*")):
            if old.read_bytes() == raw:
                return old
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        backup = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        shutil.copy2(self.path, backup)
        return backup

    def _from_node_link(self, data: dict[str, Any]):
        import networkx as nx

        g = nx.DiGraph(**data["graph"])
        for node in data["nodes"]:
            attrs = {k: v for k, v in node.items() if k != "id"}
            g.add_node(node["id"], **attrs)
        for link in data["links"]:
            attrs = {k: v for k, v in link.items() if k not in ("source", "target")}
            g.add_edge(link["source"], link["target"], **attrs)
        return g

    def to_node_link(self) -> dict[str, Any]:
        g = self.g
        return {"directed": True, "multigraph": False, "graph": dict(g.graph),
                "nodes": [{"id": n, **a} for n, a in g.nodes(data=True)],
                "links": [{"source": u, "target": v, **a} for u, v, a in g.edges(data=True)]}

    def _write(self) -> None:
        self.g.graph["updated"] = now_utc()
        write_text_or_raise(self.path, json.dumps(self.to_node_link(), indent=1, sort_keys=True) + "\n")

    def reload(self) -> None:
        self.g = self._load()

    # ------------------------------------------------------------------ seeding
    def _merge_seed(self, g) -> None:
        """Replay shipped evidence records not yet in ``g``; refresh skill nodes.

        A re-measured seed attempt (same log id, gpu and variant, new numbers)
        replaces the old record, as it does in the evidence file."""
        evidence_path = self.seed_dir / "evidence.jsonl"
        if evidence_path.is_file():
            digest = hashlib.sha1(evidence_path.read_bytes()).hexdigest()
            if g.graph.get("seed_digest") != digest:
                seeds = []
                for n, line in enumerate(evidence_path.read_text().splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        seeds.append(self._validated(**json.loads(line)))
                    except (ValueError, TypeError, GraphError) as exc:
                        self.warnings.append(f"{evidence_path}:{n}: skipped ({str(exc)[:160]})")
                self._replace_seed_records(g, seeds)
                g.graph["seed_digest"] = digest
        if self.with_skills:
            self._merge_skills(g)

    def _replace_seed_records(self, g, seeds: list[dict[str, Any]]) -> None:
        def key(r: dict[str, Any]) -> tuple:
            return (r.get("log_id"), r.get("gpu"), r.get("variant"))

        fresh = {r["rid"] for r in seeds}
        keys = {key(r) for r in seeds if r.get("variant")}
        known = set()
        for _, _, attrs in g.edges(data=True):
            records = attrs.get("records")
            if records:
                attrs["records"] = [r for r in records if r["rid"] in fresh or key(r) not in keys]
                known.update(r["rid"] for r in attrs["records"])
        for record in seeds:
            if record["rid"] not in known:
                self._apply(g, record)
                known.add(record["rid"])

    def _merge_skills(self, g) -> None:
        try:
            library = SkillLibrary(self.settings, seed_dir=self.seed_dir)
            skills = library.list(include_retired=True)
        except Exception as exc:                      # a broken skill folder must not hide the graph
            self.warnings.append(f"skills not added to the graph: {exc}")
            return
        for skill in skills:
            self._add_skill(g, skill.name, skill.pattern, skill.transformations, skill.source)

    def _add_skill(self, g, name: str, pattern: str, transformations: list[str], source: str) -> None:
        sid = f"skill:{name}"
        g.add_node(sid, kind="skill", name=name, source=source)
        pid = f"pattern:{pattern}"
        if pid not in g:
            g.add_node(pid, kind="pattern", signature=pattern, category=category_of(pattern))
        g.add_edge(sid, pid, kind="implements")
        for tid in transformations:
            if tid in self.vocabulary:
                g.add_edge(sid, f"transformation:{tid}", kind="uses")

    # ------------------------------------------------------------------ recording
    def _validated(self, pattern: Any, transformations: Any, gpu: str, outcome: str,
                   speedup_vs_eager: float | None = None, speedup_vs_compile: float | None = None,
                   dtype: str | None = None, regime: dict | None = None, log_id: str | None = None,
                   skill: str | None = None, versions: dict | None = None, date: str | None = None,
                   detail: str | None = None, kernel_ms: float | None = None, rid: str | None = None,
                   kernel_hash: str | None = None, **extra: Any) -> dict[str, Any]:
        sig = _signature(pattern)
        if outcome not in OUTCOMES:
            raise GraphError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}", usage=True)
        tids = [transformations] if isinstance(transformations, str) else list(transformations or [])
        if not tids:
            raise GraphError("an outcome needs at least one transformation id", usage=True)
        unknown = [t for t in tids if t not in self.vocabulary]
        if unknown:
            raise GraphError(f"unknown transformation id(s) {unknown}; valid ids: "
                             f"{', '.join(sorted(self.vocabulary))}; add new ones to {VOCABULARY_PATH}", usage=True)
        for name, value in (("speedup_vs_eager", speedup_vs_eager), ("speedup_vs_compile", speedup_vs_compile)):
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise GraphError(f"{name}={value!r} must be a positive finite number or None", usage=True)
        if not gpu:
            raise GraphError("gpu is required (the GPU name, e.g. 'NVIDIA H200', or 'cpu')", usage=True)
        if regime is None and isinstance(pattern, OpPattern):
            regime = {k: v for k, v in pattern.regime.items() if k != "note"}
        if regime is not None and not isinstance(regime, dict):
            raise GraphError(f"regime must be a dict, got {type(regime).__name__}", usage=True)
        if dtype is None and regime and regime.get("dtypes"):
            dtype = regime["dtypes"][0]
        record = {"pattern": sig, "transformations": tids, "gpu": str(gpu), "outcome": outcome,
                  "speedup_vs_eager": speedup_vs_eager, "speedup_vs_compile": speedup_vs_compile,
                  "dtype": dtype or "unknown", "regime": dict(regime or {}), "log_id": log_id or "",
                  "skill": skill, "versions": dict(versions or {}), "date": date or now_utc(),
                  "detail": (detail or "")[:300], "kernel_ms": kernel_ms}
        if kernel_hash:
            record["kernel_hash"] = str(kernel_hash)[:64]
        record.update({k: v for k, v in extra.items() if isinstance(v, (str, int, float, bool, type(None)))})
        record["rid"] = rid or _rid(record)
        return record

    def _apply(self, g, record: dict[str, Any]) -> None:
        sig = record["pattern"]
        pid = f"pattern:{sig}"
        if pid not in g:
            g.add_node(pid, kind="pattern", signature=sig, category=category_of(sig))
        for tid in record["transformations"]:
            tnode = f"transformation:{tid}"
            if not g.has_edge(pid, tnode):
                g.add_edge(pid, tnode, kind="evidence", records=[])
            _add_record(g.edges[pid, tnode].setdefault("records", []), record)
        gnode = f"gpu:{record['gpu']}"
        g.add_node(gnode, kind="gpu", name=record["gpu"])
        g.add_edge(pid, gnode, kind="tried_on")
        if record.get("skill"):
            sid = f"skill:{record['skill']}"
            if sid not in g:
                g.add_node(sid, kind="skill", name=record["skill"], source="learned")
            g.add_edge(sid, gnode, kind="measured_on")

    def record_outcome(self, pattern: "str | OpPattern", transformations: "list[str] | str", gpu: str,
                       outcome: str, *, speedup_vs_eager: float | None = None,
                       speedup_vs_compile: float | None = None, dtype: str | None = None,
                       regime: dict[str, Any] | None = None, log_id: str | None = None,
                       skill: str | None = None, versions: dict[str, Any] | None = None,
                       date: str | None = None, detail: str | None = None,
                       kernel_ms: float | None = None, kernel_hash: str | None = None) -> dict[str, Any]:
        """Record one attempt (reload under the lock, apply, write); returns the stored record.

        ``outcome``: one of OUTCOMES (``outcome_from_verdict`` maps a verdict to it).
        ``regime``: the pattern's regime (its ``size_class`` buckets the evidence).
        ``versions``: {"torch", "triton", "driver"}. ``detail``: one line, e.g. the
        verdict's reason. ``kernel_hash`` (``kernel_hash(source)``): a record of the same
        kernel in the same environment replaces the earlier one (``evidence_key``).
        Raises GraphError for an unknown transformation id or outcome.
        """
        return self.record_many([dict(
            pattern=pattern, transformations=transformations, gpu=gpu, outcome=outcome,
            speedup_vs_eager=speedup_vs_eager, speedup_vs_compile=speedup_vs_compile, dtype=dtype,
            regime=regime, log_id=log_id, skill=skill, versions=versions, date=date, detail=detail,
            kernel_ms=kernel_ms, kernel_hash=kernel_hash)])[0]

    def record_many(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Record several attempts in one locked read-modify-write."""
        validated = [self._validated(**r) for r in records]
        with file_lock(self.path):
            self.g = self._load()
            for record in validated:
                self._apply(self.g, record)
            self._write()
        return validated

    def add_skill(self, name: str, pattern: str, transformations: list[str], source: str = "learned") -> None:
        with file_lock(self.path):
            self.g = self._load()
            self._add_skill(self.g, name, _signature(pattern), transformations, source)
            self._write()

    # ------------------------------------------------------------------ queries
    def patterns(self) -> list[str]:
        return sorted(a["signature"] for _, a in self.g.nodes(data=True) if a.get("kind") == "pattern")

    def _records(self, sig: str, tid: str, gpu: str | None) -> list[dict[str, Any]]:
        pid, tnode = f"pattern:{sig}", f"transformation:{tid}"
        if not self.g.has_edge(pid, tnode):
            return []
        return [r for r in self.g.edges[pid, tnode].get("records", []) if gpu_matches(r.get("gpu"), gpu)]

    def _evidence_edges(self, sig: str) -> list[str]:
        pid = f"pattern:{sig}"
        if pid not in self.g:
            return []
        return [v.split(":", 1)[1] for _, v, a in self.g.out_edges(pid, data=True) if a.get("kind") == "evidence"]

    def table(self, pattern: "str | OpPattern", gpu: str | None = None) -> list[Suggestion]:
        """Every transformation tried on exactly this pattern (failed ones too), best first."""
        sig = _signature(pattern)
        rows = [suggestion(t, aggregate(rs), self.vocabulary)
                for t in self._evidence_edges(sig) if (rs := self._records(sig, t, gpu))]
        return sorted(rows, key=lambda s: (-s.score, -s.attempts, s.transformation))

    def suggest(self, pattern: "str | OpPattern", gpu: str | None = None, k: int = 8) -> list[Suggestion]:
        """Transformations to try, ranked by evidence; falls back to similar patterns.

        Transformations with at least one success on exactly this pattern are
        ranked by score; transformations that succeeded only on related patterns
        (same category, or sharing a non-elementwise op: ``matmul`` for
        ``matmul>add>relu``) join with score x similarity x 0.5 and
        ``source="similar:<pattern>"``.
        """
        sig = _signature(pattern)
        exact = [s for s in self.table(sig, gpu) if s.successes > 0]
        seen = {s.transformation for s in exact}
        category = category_of(sig)
        heavy = heavy_ops(sig)
        similar: dict[str, Suggestion] = {}
        for other in self.patterns():
            related = category_of(other) == category or bool(heavy & heavy_ops(other))
            if other == sig or not related:
                continue
            sim = similarity(sig, other)
            for tid in self._evidence_edges(other):
                if tid in seen:
                    continue
                st = aggregate(self._records(other, tid, gpu))
                if st.successes == 0:
                    continue
                cand = suggestion(tid, st, self.vocabulary, source=f"similar:{other}", sim=sim)
                if tid not in similar or cand.score > similar[tid].score:
                    similar[tid] = cand
        ranked = exact + sorted(similar.values(), key=lambda s: (-s.score, s.transformation))
        return sorted(ranked, key=lambda s: -s.score)[:k]

    def why(self, pattern: "str | OpPattern", transformation: str) -> Evidence:
        """All records of ``transformation`` on ``pattern``, with per-bucket aggregates and log ids."""
        sig = _signature(pattern)
        if transformation not in self.vocabulary:
            raise GraphError(f"unknown transformation {transformation!r}; valid ids: "
                             f"{', '.join(sorted(self.vocabulary))}", usage=True)
        return evidence(sig, transformation, self._records(sig, transformation, None))

    def _pattern_records(self, sig: str, gpu: str | None) -> list[dict[str, Any]]:
        """Every record on ``sig`` once (a record with several transformations sits on each edge)."""
        seen, out = set(), []
        for tid in self._evidence_edges(sig):
            for r in self._records(sig, tid, gpu):
                if r["rid"] not in seen:
                    seen.add(r["rid"])
                    out.append(r)
        return out

    def failures(self, pattern: "str | OpPattern", gpu: str | None = None) -> list[Failure]:
        """Attempts on ``pattern`` that failed or lost (negative knowledge), newest first."""
        out = [failure(r) for r in self._pattern_records(_signature(pattern), gpu) if r["outcome"] != "success"]
        return sorted(out, key=lambda f: f.date, reverse=True)

    def records_at(self, pattern: "str | OpPattern", input_shapes: list | None,
                   gpu: str | None = None) -> list[dict[str, Any]]:
        """Every record on exactly this pattern and these input shapes, once each: skills'
        (``record["skill"]``) and composed kernels' (no skill), failed ones included."""
        shapes = [list(s) for s in input_shapes or []]
        return [r for r in self._pattern_records(_signature(pattern), gpu)
                if [list(s) for s in (r.get("regime") or {}).get("input_shapes") or []] == shapes]

    def skill_speedups(self, pattern: "str | OpPattern", skill: str, input_shapes: list | None,
                       gpu: str | None = None) -> list[float]:
        """The speedups against torch.compile that ``skill`` was timed at on exactly this pattern
        and these input shapes (one per record, tuned rounds included)."""
        return [float(r["speedup_vs_compile"]) for r in self.records_at(pattern, input_shapes, gpu)
                if r.get("skill") == skill and r.get("speedup_vs_compile")]

    def skills_for(self, pattern: "str | OpPattern") -> list[str]:
        pid = f"pattern:{_signature(pattern)}"
        if pid not in self.g:
            return []
        return sorted(u.split(":", 1)[1] for u, _, a in self.g.in_edges(pid, data=True)
                      if a.get("kind") == "implements")

    def export(self, path: "str | Path", format: str = "graphml") -> Path:
        """Write the graph as GraphML, Graphviz DOT or node-link JSON."""
        return export(self, Path(path), format)
