"""The offline drafter (layer L3): a candidate kernel from the skill library, no LLM.

Runs on the GPU machine: imports only the standard library, torch (through
codegen and patterns), triton never (kernels are text here) and kernelrag's
L0/L1 modules that need nothing more (patterns, skills, graph).

Plan for a task, best first:
  1. skills whose pattern is exactly the task's (approved > verified > draft),
  2. a generated fused kernel when the task is an elementwise chain (codegen),
  3. the task lowered onto kernel templates (``draft.lower``): one plan per variant
     combination, in the order the reasoning graph's evidence ranks them (``lower.rank``);
     after a candidate that missed the tolerance, those on a more accurate dot path first,
  4. on a GPU, the exact skills that were slower than torch.compile on the task's input
     shapes (the graph's records) or else in their own measurement (they come after 1 there),
  5. skills of the same category with pattern similarity >= SIMILAR_MIN.
Template skills (``skills/templates/``) are never replayed: the lowering drafts their
kernels for the task at hand. A skill is used only when its ``ModelNew`` constructor accepts the task's
``get_init_inputs()``. Constants the skill declares in a ``[constants]`` table
of skill.toml (module-level names in kernel.py) take the task's module-level
values of the same name. When nothing fits the drafter says which pattern it saw
and the closest skills; it never guesses.
"""
from __future__ import annotations

import ast
import inspect
import re
import statistics
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelrag.draft.codegen import generate_elementwise
from kernelrag.draft.lower.lowering import lower
from kernelrag.task import Task
from kernelrag.types import DraftResult

if TYPE_CHECKING:
    from kernelrag.memory.skills import Skill, SkillLibrary
    from kernelrag.patterns import OpPattern

SIMILAR_MIN = 0.5
_STATE_ORDER = {"approved": 0, "verified": 1, "draft": 2, "needs_review": 3}


@dataclass
class Plan:
    kind: str                 # "skill" | "codegen" | "lowering"
    key: str                  # skill name, "codegen", or "lowering:<variants>"
    why: str
    skill: "Skill | None" = None
    score: float = 1.0


def constructor_mismatch(kernel_source: str, init_inputs: list[Any]) -> str | None:
    """Why ``ModelNew(*init_inputs)`` would fail for this kernel source, or None when it binds."""
    try:
        tree = ast.parse(kernel_source)
    except SyntaxError as exc:
        return f"kernel.py does not parse ({exc.msg}, line {exc.lineno})"
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if cls is None:
        return "kernel.py defines no class ModelNew"
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return None if not init_inputs else f"ModelNew takes no arguments but the task passes {len(init_inputs)}"
    args = init.args
    stub_args = ast.arguments(
        posonlyargs=[ast.arg(a.arg) for a in args.posonlyargs], args=[ast.arg(a.arg) for a in args.args],
        vararg=ast.arg(args.vararg.arg) if args.vararg else None,
        kwonlyargs=[ast.arg(a.arg) for a in args.kwonlyargs],
        kw_defaults=[None if d is None else ast.Constant(None) for d in args.kw_defaults],
        kwarg=ast.arg(args.kwarg.arg) if args.kwarg else None,
        defaults=[ast.Constant(None) for _ in args.defaults])
    stub = ast.Module(body=[ast.FunctionDef(name="init", args=stub_args, body=[ast.Pass()],
                                            decorator_list=[], returns=None, type_params=[])],
                      type_ignores=[])
    namespace: dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(stub), "<constructor>", "exec"), namespace)
    try:
        inspect.signature(namespace["init"]).bind(None, *init_inputs)
    except TypeError as exc:
        params = ", ".join(a.arg for a in args.args[1:]) or "no arguments"
        return f"ModelNew({params}) cannot take the task's init inputs {init_inputs!r}: {exc}"
    return None


def specialise(kernel_source: str, constants: dict[str, Any], task_module: Any) -> tuple[str, list[str]]:
    """Set each declared module-level constant to the task's value of the same name."""
    changed = []
    for name in constants:
        value = getattr(task_module, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        pattern = re.compile(rf"^{re.escape(name)}\s*(:\s*[A-Za-z_.]+\s*)?=\s*[^\n#]+", re.MULTILINE)
        new_source, n = pattern.subn(f"{name} = {value!r}", kernel_source, count=1)
        if n:
            kernel_source = new_source
            changed.append(f"{name}={value!r}")
    return kernel_source, changed


def declared_constants(skill: "Skill") -> dict[str, Any]:
    try:
        data = tomllib.loads(skill.toml_path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = data.get("constants")
    return dict(table) if isinstance(table, dict) else {}


def float_dtypes(pattern: "OpPattern") -> set[str]:
    """The floating-point dtypes a task computes in (``float32``...), from its pattern's regime."""
    dtypes = {str(d).replace("torch.", "") for d in (getattr(pattern, "regime", None) or {}).get("dtypes") or []}
    return {d for d in dtypes if d.startswith(("float", "bfloat", "half", "double"))}


def _loses_to_compile(skill: Any) -> bool:
    """The skill's own GPU measurement put it behind torch.compile."""
    ratio = (skill.provenance or {}).get("speedup_vs_compile")
    return isinstance(ratio, (int, float)) and bool((skill.provenance or {}).get("gpu")) and ratio < 1.0


def lowering_plans(task: Task, pattern: "OpPattern", notes: list[str], graph: Any = None) -> list[Plan]:
    """One plan per template-variant combination (``Plan.skill`` holds the variant tuple)."""
    from kernelrag.draft.lower.lowering import variant_choices
    from kernelrag.draft.lower.rank import lower_order

    try:
        combos = lower_order(variant_choices(task), pattern, graph)
    except Exception as exc:      # Unsupported, or the task failing on the meta device
        notes.append(f"lowering: {exc}")
        return []
    return [Plan("lowering", "lowering:" + "+".join(c), f"{pattern.signature} composed from kernel templates "
                 f"(variants {', '.join(c)})", c, 0.98 - 0.001 * k) for k, c in enumerate(combos)]


def _repair_first(plans: list[Plan], missed: tuple[str, ...]) -> list[Plan]:
    """The lowering plans that make ``missed``'s dot paths more accurate, ahead of every other plan."""
    from kernelrag.draft.lower.rank import accuracy_step, repair_order

    lowering = {tuple(p.skill): p for p in plans if p.kind == "lowering"}
    first = [lowering[c] for c in repair_order(list(lowering), missed) if accuracy_step(c, missed)]
    return first + [p for p in plans if p not in first]


class OfflineDrafter:
    """Drafts from the skill library (and codegen); one candidate per call, best untried first.

    One drafter serves one run: the plan for a (task, backend, device) is made once, and a
    codegen plan that failed is not tried again."""

    def __init__(self, library: "SkillLibrary", graph: Any = None):
        self.library = library
        self.graph = graph            # kernelrag.memory.graph.ReasoningGraph: ranks the lowering variants
        self._plans: dict[tuple, tuple[list[Plan], list[str]]] = {}
        self._failed: dict[tuple, str] = {}      # (plan key, task hash) -> why it could not draft

    def plan(self, task: "Task | str", pattern: "OpPattern", backend: str = "triton",
             device: str | None = None) -> tuple[list[Plan], list[str]]:
        """(plans best first, notes on skills passed over and why). ``device="cpu"`` passes
        over skills that cannot be checked on a CPU (CUDA C++, bf16 tensor-core kernels)."""
        task = Task.of(task)
        key = (task.sha256, getattr(pattern, "signature", None), backend, device)
        if key not in self._plans:
            self._plans[key] = self._plan(task, pattern, backend, device)
        plans, notes = self._plans[key]
        return list(plans), list(notes)

    def _plan(self, task: Task, pattern: "OpPattern", backend: str,
              device: str | None) -> tuple[list[Plan], list[str]]:
        notes: list[str] = []
        if not getattr(pattern, "known", False):
            return [], [f"the task's op pattern is unknown ({getattr(pattern, 'reason', '')})"]
        init_inputs = task.init_inputs()
        # template skills teach (retrieval, the LLM's prompt); the lowering itself drafts their
        # kernels for a task, with its parameters and the variant the graph ranks first
        usable = [s for s in self.library.list(include_retired=False) if s.backend == backend and not s.template]
        plans: list[Plan] = []

        task_dtypes = float_dtypes(pattern)     # index tensors (int64 targets) do not pick a kernel

        def add(skill, why: str, score: float) -> None:
            if task_dtypes and not task_dtypes <= set(skill.dtypes):
                notes.append(f"skill {skill.name} passed over: it is for {', '.join(skill.dtypes)}, "
                             f"the task uses {', '.join(sorted(task_dtypes))}")
                return
            if device == "cpu" and not skill.cpu_checkable:
                notes.append(f"skill {skill.name} passed over: it cannot be checked on a CPU")
                return
            problem = constructor_mismatch(skill.kernel_source(), init_inputs)
            if problem:
                notes.append(f"skill {skill.name} passed over: {problem}")
                return
            plans.append(Plan("skill", skill.name, why, skill, score))

        exact = sorted((s for s in usable if s.pattern == pattern.signature),
                       key=lambda s: (_STATE_ORDER.get(s.review_state, 9), -(s.provenance.get("speedup_vs_eager") or 0)))
        # on a GPU, an exact skill measured slower than torch.compile, by its own measurement or
        # on this task's very shapes, goes after the composed kernels unless they lost to it or
        # failed on these shapes (untried, they may win); it stays ahead of the merely similar skills
        slow = {s.name: why for s in exact if device == "cuda" and (why := self._loses_here(s, pattern))}
        for s in exact:
            if s.name not in slow:
                add(s, f"skill {s.name} implements exactly {pattern.signature} ({s.review_state})", 1.0)
        if backend == "triton":   # codegen says for itself whether the task is a chain (a meta trace)
            plans.append(Plan("codegen", "codegen", f"{pattern.signature} may be an elementwise chain: "
                                                    "generate one fused Triton kernel", 0.99))
            plans.extend(lowering_plans(task, pattern, notes, self.graph))
        for s in exact:
            if s.name in slow:
                add(s, f"skill {s.name} implements exactly {pattern.signature} ({s.review_state}); tried after "
                       f"the composed kernels: {slow[s.name]}", 0.98)
        exact_names = {s.name for s in exact}
        for m in self.library.find(pattern, category=pattern.category, k=8):
            if m.skill.name in exact_names or m.skill.backend != backend or m.score < SIMILAR_MIN or m.skill.template:
                continue
            add(m.skill, f"skill {m.skill.name} ({m.skill.pattern}) is similar to {pattern.signature} "
                         f"(similarity {m.score:.2f})", m.score)
        return plans, notes

    def _loses_here(self, skill: "Skill", pattern: "OpPattern") -> str | None:
        """Why ``skill`` goes after the composed kernels on this task: its own measurement put it
        behind torch.compile, or, where the graph holds timings on these very input shapes, their
        median did and a composed kernel untried here or faster here may win. Composed kernels
        that were all slower than the skill here, or failed, leave it first: the rounds are few."""
        shapes = (getattr(pattern, "regime", None) or {}).get("input_shapes")
        here: list[dict] = []
        if self.graph is not None and shapes:
            try:
                here = self.graph.records_at(pattern, shapes)
            except Exception:          # a graph that cannot answer leaves the skill's own figure
                here = []
        mine = [float(r["speedup_vs_compile"]) for r in here
                if r.get("skill") == skill.name and r.get("speedup_vs_compile")]
        if not mine:
            return (f"measured at {skill.provenance['speedup_vs_compile']:.2f}x torch.compile"
                    if _loses_to_compile(skill) else None)
        speedup = statistics.median(mine)
        composed = [r for r in here if not r.get("skill")]
        if speedup >= 1.0 or composed and not any((r.get("speedup_vs_compile") or 0.0) > speedup
                                                  for r in composed):
            return None
        return f"measured at {speedup:.2f}x torch.compile on these shapes (median of {len(mine)})"

    def closest(self, pattern: "OpPattern", k: int = 3) -> list[str]:
        if not getattr(pattern, "known", False):
            return []
        return [f"{m.skill.name} ({m.skill.pattern}, similarity {m.score:.2f})"
                for m in self.library.find(pattern, k=k)]

    def instantiate(self, skill: "Skill", task: "Task | str") -> DraftResult:
        """The skill's kernel made ready for this task (constants specialised)."""
        source = skill.kernel_source()
        constants = declared_constants(skill)
        changed: list[str] = []
        if constants:
            source, changed = specialise(source, constants, Task.of(task).module())
        note = f" with {', '.join(changed)}" if changed else ""
        return DraftResult(ok=True, source=source, method="skill", skill=skill.name,
                           transformations=list(skill.transformations), pattern=skill.pattern,
                           reason=f"instantiated skill {skill.name}{note}")

    def draft(self, task: "Task | str", pattern: "OpPattern", backend: str = "triton",
              exclude: set[str] | frozenset[str] = frozenset(), device: str | None = None,
              missed: str | None = None) -> DraftResult:
        """The best candidate whose key (skill name or "codegen") is not in ``exclude``.

        ``missed``: the key of a candidate that ran but missed the task's tolerance; where it was a
        lowering, the combinations that move its regions to a more accurate dot path go first."""
        sig = getattr(pattern, "signature", "unknown")
        try:
            task = Task.of(task)
            plans, notes = self.plan(task, pattern, backend, device)
        except Exception as exc:    # the task's own code failed while loading
            return DraftResult(ok=False, method="offline", pattern=sig,
                               reason=f"could not load the task ({type(exc).__name__}: {exc})")
        if missed and missed.startswith("lowering:"):
            plans = _repair_first(plans, tuple(missed.removeprefix("lowering:").split("+")))
        failed: list[str] = []
        for p in plans:
            if p.key in exclude:
                continue
            if p.kind == "codegen":
                done = self._failed.get((p.key, task.sha256, sig))
                if done is not None:          # failed once for this task: not retried
                    failed.append(done)
                    continue
                result = generate_elementwise(task, sig)
                if not result.ok:
                    self._failed[(p.key, task.sha256, sig)] = result.reason
                    failed.append(result.reason)
                    continue
            elif p.kind == "lowering":
                result = lower(task, sig, p.skill)
                if not result.ok:
                    failed.append(result.reason)
                    continue
                result.method = p.key          # "lowering:<variants>": what a caller excludes next round
            else:
                result = self.instantiate(p.skill, task)
            result.pattern = sig
            result.reason = f"{p.why}; {result.reason}"
            return result
        tried = f" (already tried: {', '.join(sorted(exclude))})" if exclude else ""
        closest = self.closest(pattern)
        why = "; ".join(notes + failed)
        category = getattr(pattern, "category", "unknown")
        return DraftResult(
            ok=False, method="offline", pattern=sig, closest=closest,
            reason=(f"no untried skill or generator fits pattern {sig} (category {category}){tried}"
                    + (f"; {why}" if why else "")
                    + (f"; closest skills: {', '.join(closest)}" if closest else "; the skill library is empty")))
