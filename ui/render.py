"""Results as things a person reads: Markdown, table rows, a roofline figure.

Pure functions of the facade's typed results (no gradio here), so they are tested
without a browser. Numbers keep their units in the column names.
"""
from __future__ import annotations

import html
import re
from typing import Any

VERDICT_HEADERS = ["#", "drafter", "status", "correct", "checks", "max abs err",
                   "kernel ms", "eager ms", "compile ms", "x eager", "x compile", "roofline %"]
SKILL_HEADERS = ["name", "pattern", "category", "backend", "state", "x eager", "gpu"]
NO_TIME = "no time measured"
_LABEL = re.compile(r"^\[\d+\] \S")


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def md_escape(text: str) -> str:
    """Text shown inside Markdown without being read as Markdown or HTML."""
    out = html.escape(str(text), quote=False)
    for ch in "\\`*_[]#|":
        out = out.replace(ch, "\\" + ch)
    return out


# --- chat -------------------------------------------------------------------------------
def sources_markdown(passages: list[Any], note: str = "") -> str:
    """The numbered sources of an answer: file, section, lines, and the start of each passage."""
    if not passages:
        return "### Sources\n" + (note or "No passages found; ingest documents with `kernelrag ingest corpus/`.")
    lines = ["### Sources"]
    for p in passages:
        c = p.citation
        where = f"§ {md_escape(c.section)}" if c.section else ""
        if c.page is not None:
            where += f", page {c.page}"
        if c.start_line is not None:
            where += f", lines {c.start_line}-{c.end_line if c.end_line is not None else c.start_line}"
        kind = f" · {c.kind}" if c.kind else ""
        lines.append(f"**[{c.number}]** `{c.source}` {where}{kind}  \n"
                     f"<small>{md_escape(_one_line(p.text, 220))}</small>")
    if note:
        lines.append(f"_{md_escape(note)}_")
    return "\n\n".join(lines)


def answer_markdown(text: str, offline: bool) -> str:
    """An answer for the chat window. Offline answers quote raw passages, whose leading
    '#' would turn into giant headings: those are escaped, and the [n] labels made bold."""
    if not offline:
        return text
    out = []
    for line in text.split("\n"):
        if _LABEL.match(line):
            line = f"**{line}**"
        elif line.lstrip().startswith(("#", "=", "-" * 3)):
            line = "\\" + line.lstrip()
        out.append(line)
    return "\n".join(out)


# --- generate ---------------------------------------------------------------------------
def _checks(verdict: Any) -> str:
    checks = getattr(verdict, "checks", None) or []
    return f"{sum(1 for c in checks if c.passed)}/{len(checks)}" if checks else "-"


def _ms(timing: Any) -> str:
    return "-" if timing is None else f"{timing.median_ms:.4g}"


def verdict_row(index: int, drafter: str, verdict: Any, error: str | None = None) -> list[str]:
    """One row of the verdict table: correctness, checks, error, times, speedups, roofline share."""
    if verdict is None:
        return [str(index), drafter, "no draft" if error else "not verified", "-", "-", "-",
                "-", "-", "-", "-", "-", "-"]
    timed = bool(verdict.timed)
    frac = verdict.frac_roofline
    return [str(index), drafter, verdict.status, "yes" if verdict.correct else "no", _checks(verdict),
            _num(verdict.max_abs_err),
            _ms(verdict.kernel_ms) if timed else NO_TIME, _ms(verdict.eager_ms) if timed else "-",
            _ms(verdict.compile_ms) if timed else "-",
            _num(verdict.speedup_vs_eager, ".2f") if timed else "-",
            _num(verdict.speedup_vs_compile, ".2f") if timed else "-",
            "-" if frac is None else f"{100 * frac:.0f}"]


def round_row(r: Any) -> list[str]:
    return verdict_row(r.index, r.drafter + (f" ({r.skill})" if r.skill else ""), r.verdict, r.error)


def round_markdown(r: Any) -> str:
    """What one round did and what the verifier said, for the round log."""
    head = f"**Round {r.index}** [{r.drafter}{' · skill ' + r.skill if r.skill else ''}]"
    if r.transformations:
        head += " · transformations: " + ", ".join(r.transformations)
    if r.verdict is None:
        return f"{head}: {md_escape(r.error or 'nothing verified')}"
    v = r.verdict
    lines = [f"{head}: **{v.status}**: {md_escape(v.summary())}"]
    if not v.ok:
        lines.append("```text\n" + v.feedback().replace("```", "'''")[:3000] + "\n```")
    if v.device == "cpu" and not v.timed:
        lines.append(f"_{NO_TIME}: on CPU the Triton interpreter checks correctness only._")
    return "\n\n".join(lines)


def result_markdown(result: Any) -> str:
    """How the run ended, and what it left behind for the next one."""
    head = "**OK**" if result.ok else "**FAILED**"
    where = " (from memory)" if result.from_memory else ""
    lines = [f"{head}{where}: `{result.pattern}`: {md_escape(result.reason)}"]
    recommend = getattr(result.verdict, "recommendation", None)
    if callable(recommend):
        lines.append(f"**Recommendation:** {md_escape(recommend())}")
    c = result.cost
    lines.append(f"{len(result.rounds)} round(s), {c.llm_calls} LLM call(s), {c.verify_calls} verification(s), "
                 f"{c.seconds:.1f} s")
    wb = result.write_back
    kept = []
    if wb.skill:
        kept.append(f"skill `{wb.skill}` ({wb.skill_state})")
    if wb.graph_records:
        kept.append(f"{wb.graph_records} graph record(s)")
    if wb.log_path:
        kept.append("optimization log" + (" (searchable)" if wb.ingested else ""))
    if kept:
        lines.append("Written back: " + ", ".join(kept) + ".")
    lines += [f"- {md_escape(n)}" for n in wb.notes]
    return "\n\n".join(lines)


def suggestions_markdown(pattern: str, transformations: list[Any], skills: list[Any] | None = None) -> str:
    """The reasoning graph's ranked transformations for a pattern, each with its evidence."""
    lines = [f"### Suggestions for `{pattern or 'unknown pattern'}`"]
    if not transformations:
        lines.append("The reasoning graph has no evidence for this pattern yet.")
    for t in transformations:
        lines.append(f"- **{t.id}** (score {t.score:.2f}){': ' + md_escape(t.rationale) if t.rationale else ''}")
        lines += [f"  - {md_escape(e)}" for e in t.evidence]
    if skills:
        lines.append("\n**Similar skills:** " + ", ".join(f"`{s.name}` ({s.state})" for s in skills))
    return "\n".join(lines)


def roofline_figure(verdict: Any):
    """A matplotlib roofline of the final kernel, or None when it was not timed."""
    if verdict is None or not verdict.timed or verdict.kernel_ms is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8), dpi=100)
    ax = fig.add_subplot()
    peak_gbps = (verdict.achieved_gbps / verdict.frac_bandwidth
                 if verdict.achieved_gbps and verdict.frac_bandwidth else None)
    peak_tflops = (verdict.achieved_tflops / verdict.frac_compute
                   if verdict.achieved_tflops and verdict.frac_compute else None)
    if verdict.flops and verdict.bytes_moved and verdict.achieved_tflops:
        intensity = verdict.flops / verdict.bytes_moved          # FLOP per byte
        xs = [10 ** (i / 20) for i in range(-60, 81)]             # 1e-3 .. 1e4 FLOP/byte
        if peak_gbps:
            roof = [peak_gbps * x / 1e3 for x in xs]              # GB/s * FLOP/B = GFLOP/s -> TFLOP/s
            if peak_tflops:
                roof = [min(r, peak_tflops) for r in roof]
            ax.plot(xs, roof, color="0.3", label=f"measured roof ({peak_gbps:.0f} GB/s"
                    + (f", {peak_tflops:.0f} TFLOP/s)" if peak_tflops else ")"))
        ax.scatter([intensity], [verdict.achieved_tflops], color="tab:red", zorder=3,
                   label=f"kernel: {verdict.achieved_tflops:.3g} TFLOP/s at {intensity:.3g} FLOP/B")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("TFLOP/s")
        ax.legend(loc="lower right", fontsize=8)
    elif verdict.achieved_gbps:                                  # pure data movement: bandwidth only
        bars = [("kernel", verdict.achieved_gbps)] + ([("memory ceiling", peak_gbps)] if peak_gbps else [])
        ax.bar([b[0] for b in bars], [b[1] for b in bars], color=["tab:red", "0.6"][:len(bars)])
        ax.set_ylabel("GB/s")
    else:
        return None
    frac = f", {100 * verdict.frac_roofline:.0f}% of the roofline floor" if verdict.frac_roofline else ""
    ax.set_title(f"{verdict.kernel_ms.median_ms:.4g} ms on {verdict.gpu or verdict.device}{frac}", fontsize=10)
    fig.tight_layout()
    return fig


# --- skills -----------------------------------------------------------------------------
def skill_rows(refs: list[Any], query: str = "") -> list[list[str]]:
    words = query.lower().split()
    rows = []
    for s in refs:
        hay = " ".join([s.name, s.pattern, s.category, s.summary, *s.transformations]).lower()
        if all(w in hay for w in words):
            rows.append([s.name, s.pattern, s.category, s.backend, s.state,
                         _num(s.speedup_vs_eager, ".2f"), s.gpu or "-"])
    return rows


def skill_markdown(skill: Any, status: Any) -> str:
    """A skill's status (``kernelrag.memory.skill_status``), transformations and measured provenance."""
    lines = [f"### {skill.name}",
             f"`{skill.pattern}` · {skill.category} · {skill.backend} · {skill.source}",
             f"**{md_escape(status.label())}**",
             md_escape(skill.summary),
             "Transformations: " + (", ".join(f"`{t}`" for t in skill.transformations) or "none")]
    prov = {k: v for k, v in (skill.provenance or {}).items() if v is not None}
    if prov:
        lines.append("| provenance | value |\n|---|---|\n" + "\n".join(
            f"| {k} | {md_escape(_num(v, '.4g') if isinstance(v, float) else v)} |" for k, v in sorted(prov.items())))
    else:
        lines.append("Provenance: never measured.")
    return "\n\n".join(lines)
