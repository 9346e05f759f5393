"""Exporting the reasoning graph: GraphML (networkx), DOT (written by hand) or JSON.

GraphML and DOT hold scalar attributes only, so evidence edges are summarised
(attempts, successes, Wilson lower bound, score, median speedups, log ids); the
JSON export is the full node-link data with every record.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelrag.errors import GraphError
from kernelrag.memory.graph_query import aggregate
from kernelrag.memory.storage import atomic_write_text

FORMATS = ("graphml", "dot", "json")
_SHAPES = {"pattern": "box", "transformation": "ellipse", "skill": "note", "gpu": "diamond"}


def _scalar(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return value
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return json.dumps(value, sort_keys=True)


def summary_graph(graph: Any):
    """A copy of the graph with scalar attributes only."""
    import networkx as nx

    out = nx.DiGraph()
    for n, attrs in graph.g.nodes(data=True):
        out.add_node(n, label=n.split(":", 1)[1], **{k: _scalar(v) for k, v in attrs.items()})
    for u, v, attrs in graph.g.edges(data=True):
        flat = {k: _scalar(val) for k, val in attrs.items() if k != "records"}
        if attrs.get("kind") == "evidence":
            st = aggregate(attrs.get("records", []))
            flat.update(attempts=st.attempts, successes=st.successes, success_rate_lb=st.success_rate_lb,
                        score=st.score, log_ids=",".join(st.log_ids), gpus=",".join(st.gpus),
                        median_speedup_vs_eager=_scalar(st.median_speedup_vs_eager),
                        median_speedup_vs_compile=_scalar(st.median_speedup_vs_compile))
        out.add_edge(u, v, **flat)
    return out


def _dot_quote(text: Any) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: Any) -> str:
    g = summary_graph(graph)
    lines = ["digraph kernelrag {", "  rankdir=LR;", "  node [fontname=Helvetica];"]
    for n, a in g.nodes(data=True):
        shape = _SHAPES.get(a.get("kind"), "ellipse")
        lines.append(f"  {_dot_quote(n)} [label={_dot_quote(a.get('label', n))}, shape={shape}];")
    for u, v, a in g.edges(data=True):
        label = a.get("kind", "")
        if a.get("kind") == "evidence":
            label = f"{a['successes']}/{a['attempts']} ok"
            if a.get("median_speedup_vs_eager") not in ("", None):
                label += f", {float(a['median_speedup_vs_eager']):.2f}x"
        style = ", style=dashed" if a.get("kind") in ("implements", "uses", "measured_on", "tried_on") else ""
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} [label={_dot_quote(label)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def export(graph: Any, path: Path, format: str = "graphml") -> Path:
    if format not in FORMATS:
        raise GraphError(f"export format {format!r} is not one of {', '.join(FORMATS)}", usage=True)
    path = Path(path)
    if format == "json":
        atomic_write_text(path, json.dumps(graph.to_node_link(), indent=1, sort_keys=True) + "\n")
    elif format == "dot":
        atomic_write_text(path, to_dot(graph))
    else:
        import networkx as nx

        path.parent.mkdir(parents=True, exist_ok=True)
        nx.write_graphml(summary_graph(graph), str(path))
    return path
