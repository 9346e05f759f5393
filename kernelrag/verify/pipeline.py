"""``verify`` and ``verify_source``: static checks, then the two-process run, then a Verdict.

Standard library only in this process: torch and the candidate live in the workers.
"""
from __future__ import annotations

import ast
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kernelrag.errors import KernelRAGError, TaskError
from kernelrag.verify import isolation
from kernelrag.verify import task as T
from kernelrag.verify.ceilings import host_gpu
from kernelrag.verify.outcome import assemble
from kernelrag.verify.precision import describe as describe_precision, source_precisions
from kernelrag.verify.sandbox import Job, Session, run_session
from kernelrag.verify.static import StaticPolicy, check_source
from kernelrag.verify.tolerances import check_override
from kernelrag.verify.verdict import Phases, Verdict

DEVICES = ("auto", "cpu", "cuda")
# inputs + outputs of one call, per device: small enough for the interpreter, big enough to matter
# cuda: correctness trials run at up to 256 MiB of tensors (outputs cross processes through
# files); the timed call runs at the task's own sizes and its output is compared too.
BUDGET_BYTES = {"cpu": (512 << 10, 1 << 20), "cuda": (256 << 20, 32 << 20)}
LITERAL_THRESHOLD = 64


def verify(task_path: str | Path, candidate_path: str | Path, **options: Any) -> Verdict:
    """Verify the candidate file against the KernelBench task file (see ``verify_source``)."""
    task_path, candidate_path = Path(task_path), Path(candidate_path)
    if not task_path.is_file():
        raise TaskError(f"task file {task_path} does not exist; pass a KernelBench task .py file")
    if not candidate_path.is_file():
        raise KernelRAGError(f"candidate file {candidate_path} does not exist; pass a .py file defining ModelNew")
    return verify_source(task_path.read_text(), read_candidate(candidate_path), **options)


MAX_CANDIDATE_BYTES = 1 << 20


def read_candidate(path: Path) -> str:
    """The text of a candidate file; refuses anything but a Python source of reasonable size,
    so that no report ever quotes a line of some other file."""
    real = Path(path).resolve()
    if real.suffix != ".py":
        raise KernelRAGError(f"candidate {path} is not a Python source file (.py); pass the .py file "
                             "defining ModelNew")
    size = real.stat().st_size
    if size > MAX_CANDIDATE_BYTES:
        raise KernelRAGError(f"candidate {path} is {size} bytes, more than the {MAX_CANDIDATE_BYTES} allowed")
    try:
        return real.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise KernelRAGError(f"candidate {path} is not UTF-8 text; pass a Python source file") from None


def verify_source(task_src: str, candidate_src: str, *, device: str = "auto", timeout_s: float = 300.0,
                  trials: int = 5, measure_time: bool = True, seed: int | None = None,
                  tolerance: dict[str, float] | str | None = None, policy: StaticPolicy | None = None,
                  cache_dir: str | Path | None = None, require_isolation: bool = False,
                  runner: Callable[[Job], Session] | None = None, profile: bool = False,
                  gate: Any = None) -> Verdict:
    """Check a candidate against a task and return a Verdict; never raises on a bad kernel.

    ``device``: "auto" (cuda when a GPU is visible), "cpu" (Triton interpreter, shrunk
    sizes, no timing) or "cuda". ``trials``: correctness trials on fresh inputs (5 input
    distributions in turn). ``seed``: fixes the trials for reproduction (random by
    default). ``tolerance``: a row of the table ("tf32") or {"atol", "rtol", "rel_norm"},
    overriding the task's ``TOLERANCE`` and the dtype default. ``policy``: static rules
    to disable or downgrade. ``require_isolation``: refuse to run the candidate unless
    an OS sandbox is in force (KernelRAGError); the verdict's ``isolation`` names what
    was. ``runner``: runs the processes (``sandbox.run_session`` by default; a
    ``session.VerifySession`` passes its own, with warm processes and caches).
    ``profile``: on a GPU, profile a verified candidate's kernels once with ncu
    (``profile.profile_candidate``) into ``verdict.profile``; costs a run under the
    profiler, so it is off by default. ``gate``: a session's GPU gate, held alone for the
    profiled run. Raises TaskError only when the task file is malformed.
    """
    start = time.monotonic()
    if device not in DEVICES:
        raise KernelRAGError(f"device={device!r} is not one of {', '.join(DEVICES)}")
    if trials < 1:
        raise KernelRAGError(f"trials={trials} must be at least 1 (5 or more recommended)")
    try:
        check_override(tolerance)
    except ValueError as exc:
        raise KernelRAGError(str(exc)) from None
    tree = T.check_task_source(task_src)
    resolved = _resolve_device(device)
    seed = secrets.randbelow(2**31 - 1000) if seed is None else int(seed)
    v = Verdict(device=resolved, trials=trials, seed=seed, phases=Phases())
    static = check_source(candidate_src, policy)
    v.phases.add("static", time.monotonic() - start)
    v.findings = list(static.findings)
    early = _static_verdict(v, static)
    if early is None:
        iso = isolation.probe()
        v.isolation = iso.describe()
        if require_isolation and not iso.active:
            raise KernelRAGError(
                f"OS isolation is required to run this candidate but none is available ({iso.describe()}); "
                "allow user namespaces (sysctl kernel.unprivileged_userns_clone=1), install util-linux, "
                "or run without --require-isolation / require_isolation=false for trusted code only")
        task_tol = _task_tolerance(tree)
        if tolerance is None and task_tol is not None:
            try:
                check_override(task_tol)
            except ValueError as exc:
                raise TaskError(f"the task's TOLERANCE is invalid: {exc}") from None
            tolerance = task_tol
            v.warnings.append(f"tolerance {task_tol} declared by the task")
        v = _run(v, task_src, tree, candidate_src, static, resolved, device, timeout_s, trials,
                 measure_time, seed, tolerance, cache_dir, runner or run_session)
        if profile:
            _profile(v, task_src, candidate_src, timeout_s, gate)
    else:
        v = early
        v.isolation = "not needed: rejected before any candidate code ran"
    v.wall_s = round(time.monotonic() - start, 3)
    hidden = ("process_start", "imports") if "warm-process" in v.phases.reused else ()
    v.phases.add("other", max(0.0, v.wall_s - sum(x for k, x in v.phases.seconds.items() if k not in hidden)))
    return v


def _run(v, task_src, tree, candidate_src, static, resolved, requested, timeout_s, trials, measure_time,
         seed, tolerance, cache_dir, runner) -> Verdict:
    if resolved == "cpu" and (static.uses_cuda_extension or static.uses_cpp_extension):
        return _stop(v, "not_checkable", "CUDA C++ (load_inline) cannot run on a CPU, and no C++ is compiled "
                                         "in CPU mode; verify on a GPU", compiled=False, checkable=False)
    primary, second = T.variants(task_src, resolved)
    budget_primary, budget_second = BUDGET_BYTES[resolved]
    job = Job(candidate_source=candidate_src, device=resolved, seed=seed, trials=trials,
              timeout_s=timeout_s, measure_time=measure_time,
              primary=[x.to_dict() for x in primary], second=[x.to_dict() for x in second],
              original=T.Variant("original", task_src).to_dict(), budget_primary=budget_primary,
              budget_second=budget_second, tolerance=tolerance, uses_tl_dot=static.uses_tl_dot,
              cache_dir=_cache_dir(cache_dir, resolved))
    session = runner(job)
    if requested == "auto" and resolved == "cuda" and session.ready and session.ready.get("kind") == "no_cuda":
        v.device = "cpu"
        v.warnings.append("a GPU is visible but torch cannot use it; checked on the CPU instead")
        return _run(v, task_src, tree, candidate_src, static, "cpu", "cpu", timeout_s, trials,
                    measure_time, seed, tolerance, cache_dir, runner)
    literal = T.literal_sizes_in_get_inputs(tree, LITERAL_THRESHOLD) if resolved == "cpu" else []
    if literal:
        v.warnings.append(f"get_inputs uses literal sizes {literal} that cannot be shrunk; they run as written")
    v = assemble(v, session, static)
    v.precision = describe_precision((session.result or session.phase1 or {}).get("dot_precisions"),
                                     source_precisions(candidate_src), resolved,
                                     (session.ready or {}).get("input_dtypes"))
    if literal and v.status == "not_checkable":
        v.reason += f"; get_inputs uses literal sizes {literal}, which cannot be shrunk"
    if v.timed and not v.driver:
        v.driver = _driver_version()
    return v


def _profile(v: Verdict, task_src: str, candidate_src: str, timeout_s: float, gate: Any = None) -> None:
    """ncu counters for a verified candidate on a GPU; elsewhere a note of why there are none.
    In a session (``gate``: its ``GpuGate``) the profiled run has the GPU alone, as a timing
    does: ncu's replays would otherwise overlap the other candidates' timed rounds."""
    if v.device != "cuda":
        v.profile = {"profiled": False, "note": "no GPU: the profiler needs one"}
    elif not v.ok:
        v.profile = {"profiled": False, "note": f"not profiled: the candidate is {v.status}"}
    else:
        from kernelrag.verify.gate import Held
        from kernelrag.verify.profile import profile_candidate

        held = Held(gate)
        try:
            held.exclusive()
            v.profile = profile_candidate(task_src, candidate_src, timeout_s=min(timeout_s, 180.0), seed=v.seed or 0)
        finally:
            held.release()
    if not v.profile.get("profiled"):
        v.warnings.append(f"profile: {v.profile['note']}; event timing only")


def _static_verdict(v: Verdict, static) -> Verdict | None:
    if static.syntax_error:
        return _stop(v, "compile_error", f"syntax error at {static.syntax_error}", compiled=False,
                     error=static.syntax_error)
    if not static.has_model_new:
        return _stop(v, "compile_error", "the candidate defines no class ModelNew(nn.Module)", compiled=False)
    if static.blocking:
        f = static.blocking[0]
        more = f" (+{len(static.blocking) - 1} more)" if len(static.blocking) > 1 else ""
        where = f" at line {f.line}" if f.line else ""
        return _stop(v, "rejected", f"{f.rule}{where}: {f.message}{more}", compiled=False)
    return None


def _stop(v: Verdict, status: str, reason: str, *, compiled: bool, checkable: bool = True,
          error: str | None = None) -> Verdict:
    v.status, v.reason, v.compiled, v.checkable, v.error = status, reason, compiled, checkable, error
    v.ok = v.correct = False
    if v.device == "cpu":
        v.warnings.append("no time measured")
    return v


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    torch = sys.modules.get("torch")
    if torch is not None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    visible = Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None
    return "cuda" if visible else "cpu"


def declared_tolerance(task_src: str) -> dict | str | None:
    """The task's own ``TOLERANCE``, if it declares one (TaskError when malformed)."""
    return _task_tolerance(T.check_task_source(task_src))


def _task_tolerance(tree: ast.Module) -> dict | str | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TOLERANCE"
                                                for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise TaskError("TOLERANCE in the task must be a literal: a table row name such as "
                                "\"tf32\" or a dict with atol, rtol, rel_norm") from None
    return None


def _cache_dir(given: str | Path | None, device: str) -> str | None:
    """Where the GPU part keeps measured ceilings: ``given``, else $KERNELRAG_HOME/cache."""
    if given or device != "cuda":
        return str(given) if given else None
    from kernelrag.config import load_settings
    from kernelrag.errors import ConfigError

    try:
        return str(load_settings().cache_dir)
    except ConfigError:
        return None


def _driver_version() -> str | None:
    ident = host_gpu()            # nvidia-smi once per process
    return ident[1] if ident else None
