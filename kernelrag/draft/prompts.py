"""Prompts for the LLM drafter and for ``ask`` (layer L3; standard library only).

A kernel prompt carries, in this order: the rules, the task source and its op
pattern, the target GPU's measured figures, the reasoning graph's ranked
transformations with evidence and known failures, retrieved passages numbered
for citation, one or two similar skills' kernels as worked examples, the lowering's
composed draft of this very task as a starting point (its kernels from verified
templates, and the ops it left in PyTorch for the model to replace), and from round
2 the previous draft and the verifier's feedback on it.
"""
from __future__ import annotations

import re

from kernelrag.memory.storage import load_vocabulary
from kernelrag.types import DraftResult, GpuFigures, Passage, RetrievedContext, SkillRef, Transformation

PASSAGE_CHARS = 1500
EXAMPLE_CHARS = 6000
COMPOSED_CHARS = 16000
PREVIOUS_CHARS = 8000


def vocabulary() -> list[str]:
    """Transformation ids, from the graph's vocabulary file."""
    return list(load_vocabulary())


def declared_transformations(source: str) -> list[str]:
    """Ids named on a ``transformations: a, b`` line of a kernel's docstring, in vocabulary order."""
    match = re.search(r"^\s*(?:\"\"\"|''')?\s*transformations\s*:\s*([^\n\"']*)", source or "", re.MULTILINE)
    if not match:
        return []
    named = {t.strip() for t in re.split(r"[,\s]+", match.group(1)) if t.strip()}
    return [t for t in vocabulary() if t in named]


def kernel_system(backend: str = "triton") -> str:
    how = ("@triton.jit kernels (import triton, triton.language as tl)" if backend == "triton" else
           "CUDA C++ kernels compiled with torch.utils.cpp_extension.load_inline")
    return f"""You are an expert GPU kernel engineer. You replace a PyTorch reference with a faster, exactly
equivalent implementation whose work is done by {how}.

Rules (a verifier checks every one; breaking one fails the round):
- Answer with exactly one ```python block holding the complete module: imports, kernels, launcher, model.
- Define class ModelNew(nn.Module) with the same constructor arguments as Model and the same forward
  inputs and outputs. Do not subclass Model.
- Never call the PyTorch op you replace, torch.ops.aten, torch.nn.functional compute ops, cuBLAS or
  cuDNN, and never fall back to PyTorch in try/except. Allocating outputs (torch.empty*) is fine.
- Kernels are shape-generic: read sizes and strides from the inputs, mask the tails, any batch size.
- Keep fp32 accuracy: accumulate in fp32, no TF32 or fp16 shortcuts for fp32 tasks.
- Start the module with a docstring whose first line is `transformations: <ids>`, naming the ids you
  used from: {", ".join(vocabulary())}."""


def _task_section(ctx: RetrievedContext) -> str:
    pattern = ctx.pattern
    lines = ["## Task (KernelBench format)", "```python", ctx.task_source.rstrip("\n"), "```"]
    if pattern is not None and getattr(pattern, "known", False):
        regime = getattr(pattern, "regime", {}) or {}
        shapes = regime.get("input_shapes")
        lines.append(f"Op pattern: {pattern.signature} (category {pattern.category})"
                     + (f"; input shapes {shapes}, dtypes {regime.get('dtypes')}" if shapes else ""))
    elif pattern is not None:
        lines.append(f"Op pattern: unknown ({getattr(pattern, 'reason', '')})")
    return "\n".join(lines)


def _transformations_section(items: list[Transformation], failures: list[str]) -> str:
    if not items and not failures:
        return ""
    lines = ["## Transformations ranked by the reasoning graph (with their evidence)"]
    for i, t in enumerate(items, 1):
        lines.append(f"{i}. {t.id} (score {t.score:.2f})" + (f": {t.rationale}" if t.rationale else ""))
        lines.extend(f"   - {e}" for e in t.evidence[:3])
    if failures:
        lines.append("Known failures for this pattern (do not repeat them):")
        lines.extend(f"- {f}" for f in failures[:6])
    return "\n".join(lines)


def passages_section(passages: list[Passage], chars: int = PASSAGE_CHARS) -> str:
    if not passages:
        return ""
    lines = ["## Retrieved passages (cite as [n])"]
    for p in passages:
        text = p.text.strip()
        if len(text) > chars:
            text = text[:chars].rstrip() + " ..."
        lines += [p.citation.label(), text, ""]
    return "\n".join(lines).rstrip()


def _examples_section(examples: list[tuple[SkillRef, str]]) -> str:
    parts = []
    for ref, kernel in examples:
        if len(kernel) > EXAMPLE_CHARS:
            kernel = kernel[:EXAMPLE_CHARS] + "\n# ... (truncated)"
        speed = f", {ref.speedup_vs_eager:.2f}x vs eager on {ref.gpu}" if ref.speedup_vs_eager else ""
        parts.append(f"## Worked example: skill {ref.name} (pattern {ref.pattern}; "
                     f"{', '.join(ref.transformations) or 'no transformations listed'}{speed})\n"
                     f"```python\n{kernel.rstrip()}\n```")
    return "\n\n".join(parts)


def composed_section(composed: DraftResult | None) -> str:
    """The lowering's draft of this task (``lower(..., partial=True)``) as a starting point."""
    if composed is None:
        return ""
    if not composed.ok:
        return f"## kernelrag's lowering could not compose this task\n{composed.reason}"
    source = composed.source
    if len(source) > COMPOSED_CHARS:
        source = source[:COMPOSED_CHARS] + "\n# ... (truncated)"
    left = ("Left in PyTorch (no template places them; write kernels for these, the verifier rejects "
            "PyTorch compute ops):\n" + "\n".join(f"- {op}" for op in composed.unplaced)
            if composed.unplaced else "Every op of the task is placed in a kernel.")
    return (f"## Starting point: the task composed from kernelrag's verified templates (not yet verified here)\n"
            f"{composed.reason}\n{left}\nImprove on it or replace it; keep what is right.\n"
            f"```python\n{source.rstrip()}\n```")


def kernel_messages(ctx: RetrievedContext, gpu: GpuFigures, *, backend: str = "triton",
                    examples: list[tuple[SkillRef, str]] = (), previous_answer: str | None = None,
                    feedback: str | None = None, composed: DraftResult | None = None) -> list[dict[str, str]]:
    """Chat messages for one drafting round. From round 2, pass the previous answer
    (or draft) and the verifier's ``feedback()`` on it; ``composed`` is the lowering's
    draft of the task (Triton only), shown as a starting point."""
    sections = [
        _task_section(ctx),
        f"## Target GPU\n{gpu.describe()}",
        _transformations_section(ctx.transformations, ctx.failures),
        passages_section(ctx.passages),
        _examples_section(list(examples)),
        composed_section(composed),
        "Write the complete module defining ModelNew now.",
    ]
    messages = [{"role": "system", "content": kernel_system(backend)},
                {"role": "user", "content": "\n\n".join(s for s in sections if s)}]
    if feedback is not None:
        answer = (previous_answer or "(no answer)")[-PREVIOUS_CHARS:]
        messages.append({"role": "assistant", "content": answer})
        messages.append({"role": "user", "content":
                         "That attempt did not pass. Feedback:\n\n" + feedback.strip()
                         + "\n\nFix the problem and answer again with the complete module in one "
                           "```python block."})
    return messages


def sft_messages(task_source: str, backend: str = "triton") -> list[dict[str, str]]:
    """The plain prompt of an exported training pair: rules and the task, nothing retrieved."""
    return [{"role": "system", "content": kernel_system(backend)},
            {"role": "user", "content": f"## Task (KernelBench format)\n```python\n{task_source.rstrip()}\n```\n\n"
                                        "Write the complete module defining ModelNew now."}]


ASK_SYSTEM = """You answer questions about GPU kernel optimization (CUDA, Triton, PTX/SASS, memory
hierarchy, tensor cores). Use the numbered passages below as your sources and cite them inline as [n]
right after the claim they support. If the passages do not cover the question, say so plainly and
answer only what you can support. Be concise and concrete: name the technique, say why it helps,
give numbers when the passages do."""


def ask_messages(question: str, passages: list[Passage], transformations: list[Transformation] = (),
                 skills: list[SkillRef] = ()) -> list[dict[str, str]]:
    sections = [f"Question: {question.strip()}", passages_section(passages)]
    if transformations:
        sections.append("Transformations the reasoning graph ranks for the ops in the question:\n" + "\n".join(
            f"- {t.id} (score {t.score:.2f})" + (f": {t.evidence[0]}" if t.evidence else "")
            for t in transformations))
    if skills:
        sections.append("Verified kernels in the skill library that may help:\n" + "\n".join(
            f"- {s.name} ({s.pattern}): {s.summary}" for s in skills))
    return [{"role": "system", "content": ASK_SYSTEM},
            {"role": "user", "content": "\n\n".join(s for s in sections if s)}]
