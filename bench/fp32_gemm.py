"""fp32 GEMM on tensor cores at fp32 accuracy: ceilings, paths side by side, tuning memory.

One call on the GPU machine, from the repository root (about 4-6 minutes on an H200):

    PYTHONPATH=. python3 bench/fp32_gemm.py --out $OUT

Stages, each writing its JSON file into --out as soon as it is done:

1. ``env.json``, ``ceilings.json``: the GPU's ceilings measured now, including each fp32
   precision path (cuBLAS IEEE fp32, cuBLAS TF32, Triton 3xTF32) with its error;
2. ``gemm.json``: C = A @ B at 2048^3, 4096^3 and 8192^3 by cuBLAS fp32, cuBLAS TF32, the
   reference 3xTF32 kernel (B already K-major), the matmul_tf32x3 skill (B as stored,
   transposed in one pass inside the timed call) with its tuned configuration, and the
   offline lowering's GEMM template (what the generate loop drafts for an fp32 matmul: B
   split into TF32 parts in one pass, A too from N = 4096, else split in the K loop): TFLOP/s
   (median, IQR, trials) and relative error against fp64; the skill and the template are timed
   round-robin with cuBLAS fp32 (``ieee_side_by_side``), the base of their ratios, and each
   one's host time a call with the GPU held busy (``host_us``: its Python and launches, which
   a small product's timed call waits on once they outlast the L2 flush before it);
3. ``tuning.json``: the tuning memory's searches (``kernelrag.memory.tuning.autotune``):
   the matmul skill at each size (the first size times every configuration, later ones
   the top ones the graph's evidence ranks), the linear + ReLU / GELU / tanh-GELU skills
   at the suite's 8192 x 4096 x 4096, then one repeated key to show the search skipped
   and the cached winner re-verified; every configuration's result is also a graph
   record, and so is every precision path and layout of stage 2 against cuBLAS fp32
   (``evidence-configs.jsonl``, in skills/evidence.jsonl's format);
4. ``verify-<skill>.json``, ``measure-skills.jsonl``: each new skill measured the way
   ``kernelrag.bench.measure_skills`` measures seed skills (the first two also with the
   ncu profile, ``profile=True``), while time is left; apply the results with
   ``python3 -m kernelrag.bench.measure_skills --apply measure-skills.jsonl``.

``summary.json`` says whether fp32 GEMM (the faster of the skill and the template) reached 2x
cuBLAS fp32 at relative error <= 1e-6.
``--device cpu`` runs every stage on tiny shapes under Triton's interpreter (no ceilings,
no speed: a dry run of the code paths). Imports only the standard library, torch,
triton, numpy and networkx (through kernelrag's verifier and memory).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_SPEEDUP, GOAL_REL_ERR = 2.0, 1e-6
CHECK_REL_ERR = 1e-5                      # the fp32 table's relative-norm tolerance
PROFILED_SKILLS = 2                       # the first skills of stage 4 also get the ncu profile
SKILLS = {   # skill -> (kernel file, launcher, suite task, epilogue on the fp64 reference)
    "matmul_tf32x3": ("skills/matmul/matmul_tf32x3/kernel.py", "matmul_tf32x3", "bench/tasks/matmul_fp32.py", None),
    "linear_relu_tf32x3": ("skills/matmul_add_relu/linear_relu_tf32x3/kernel.py", "linear_relu_tf32x3",
                           "bench/tasks/linear_relu.py", "relu"),
    "linear_gelu_tanh_tf32x3": ("skills/matmul_add_gelu/linear_gelu_tanh_tf32x3/kernel.py",
                                "linear_gelu_tanh_tf32x3", "bench/tasks/linear_gelu.py", "gelu_tanh"),
    "linear_gelu_tf32x3": ("skills/matmul_add_gelu/linear_gelu_tf32x3/kernel.py", "linear_gelu_tf32x3",
                           "skills/matmul_add_gelu/linear_gelu_tf32x3/reference.py", "gelu"),
}
PATTERNS = {"matmul_tf32x3": "matmul", "linear_relu_tf32x3": "matmul>add>relu",
            "linear_gelu_tanh_tf32x3": "matmul>add>gelu[approximate=tanh]", "linear_gelu_tf32x3": "matmul>add>gelu"}


class Run:
    def __init__(self, out: Path, device: str, budget_s: float):
        self.out, self.device, self.cpu = out, device, device == "cpu"
        self.deadline = time.monotonic() + budget_s
        self.summary: dict = {"stages": {}}
        self.records: list[dict] = []
        self.template = None            # the GEMM template's launcher, rendered on first use

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self, name: str, data) -> None:
        (self.out / name).write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")

    def attempt(self, label: str, fn, *args, **kwargs):
        """``fn(*args)``, or ``{"error": ...}`` (traceback in error-<label>.txt): one failed item
        must not cost the rest of its stage."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:   # noqa: BLE001
            (self.out / f"error-{label}.txt").write_text(traceback.format_exc())
            print(f"[fp32_gemm] {label}: {type(exc).__name__}: {exc}", flush=True)
            return {"error": f"{type(exc).__name__}: {exc}"[:400]}

    def stage(self, name: str, fn) -> None:
        t0 = time.monotonic()
        try:
            fn()
            status = "done"
        except Exception as exc:   # noqa: BLE001 - one failed stage must not lose the others
            status = f"failed: {type(exc).__name__}: {exc}"
            (self.out / f"error-{name}.txt").write_text(traceback.format_exc())
        self.summary["stages"][name] = {"status": status, "wall_s": round(time.monotonic() - t0, 2)}
        print(f"[fp32_gemm] {name}: {status} ({time.monotonic() - t0:.1f} s, {self.left():.0f} s left)", flush=True)
        self.write("summary.json", self.summary)


def load_module(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def environment(torch, triton) -> dict:
    env = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": "cpu", "gpu": "cpu"}
    if torch.cuda.is_available():
        from kernelrag.verify.ceilings import driver_version

        props = torch.cuda.get_device_properties(0)
        env.update(device="cuda", gpu=props.name, sm_count=props.multi_processor_count, driver=driver_version(),
                   cuda=torch.version.cuda)
    return env


def reference64(torch, a, w_or_b, bias, epilogue, b_is_weight):
    ref = a.double() @ (w_or_b.double().t() if b_is_weight else w_or_b.double())
    if bias is not None:
        ref = ref + bias.double()
    if epilogue == "relu":
        ref = torch.relu(ref)
    elif epilogue == "gelu":
        ref = torch.nn.functional.gelu(ref)
    elif epilogue == "gelu_tanh":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    return ref


def checker(ref64):
    def check(out):
        err = float((out.double() - ref64).norm() / ref64.norm())
        return err <= CHECK_REL_ERR, f"relative error {err:.3g} against fp64 (tolerance {CHECK_REL_ERR:g})"
    return check


class Tuner:
    """Runs the tuning memory for one skill at one shape, with the graph and store under --out."""

    def __init__(self, run: Run, torch, triton, env: dict):
        from kernelrag.config import load_settings
        from kernelrag.memory.graph import ReasoningGraph
        from kernelrag.memory.tuning import TuningStore

        self.run, self.torch, self.env = run, torch, env
        self.settings = load_settings(home=run.out / "home", seed_skills_dir=ROOT / "skills")
        self.graph = ReasoningGraph(self.settings)
        self.seeded = {rec["rid"] for _, _, data in self.graph.g.edges(data=True)   # shipped before this run
                       for rec in data.get("records", [])}
        self.store = TuningStore(self.settings.cache_dir)
        self.dev = "cpu" if run.cpu else "cuda"
        self.modules = {name: load_module(spec[0], name) for name, spec in SKILLS.items()}

    def tune(self, skill: str, m: int, n: int, k: int, top_k: int) -> dict:
        from kernelrag.memory.tuning import TuningKey, autotune, config_dict
        from kernelrag.patterns import size_class
        from kernelrag.verify.tune import time_configs, time_configs_cpu

        torch = self.torch
        rel, fn_name, _, epilogue = SKILLS[skill]
        mod = self.modules[skill]
        launcher = getattr(mod, fn_name)
        gen = torch.Generator(device=self.dev).manual_seed(m * 7 + n * 3 + k)
        a = torch.randn(m, k, device=self.dev, generator=gen)
        if skill == "matmul_tf32x3":
            b, bias = torch.randn(k, n, device=self.dev, generator=gen), None
            launch = lambda cfg: launcher(a, b, config=cfg)   # noqa: E731
            dtypes = [str(a.dtype), str(b.dtype)]
        else:
            b = torch.randn(n, k, device=self.dev, generator=gen) / k ** 0.5
            bias = torch.randn(n, device=self.dev, generator=gen)
            launch = lambda cfg: launcher(a, b, bias, config=cfg)   # noqa: E731
            dtypes = [str(a.dtype), str(b.dtype), str(bias.dtype)]
        check = checker(reference64(torch, a, b, bias, epilogue, skill != "matmul_tf32x3"))
        key = TuningKey.make((ROOT / rel).read_text(), {"M": m, "N": n, "K": k}, dtypes, self.env)
        timer = time_configs_cpu if self.run.cpu else time_configs
        options = {"iters": 3} if self.run.cpu else {"iters": 30, "warmup": 2}
        t0 = time.monotonic()
        result = autotune(key, [config_dict(c) for c in mod.CONFIGS], launch, check, self.store,
                          graph=self.graph, pattern=PATTERNS[skill], top_k=top_k, skill=skill,
                          transformations=["tiling", "tensor_cores", "split_precision_tf32x3",
                                           "k_major_operands", "grouped_ordering"],
                          regime={"input_shapes": [[m, k], [k, n] if skill == "matmul_tf32x3" else [n, k]],
                                  "dtypes": ["float32"], "size_class": size_class(max(m * k, m * n, n * k))},
                          log_id=f"tune-{self.env['date'][:10]}-{skill}-{m}x{n}x{k}", timer=timer,
                          timer_options=options)
        out = result.to_dict()
        out.update(skill=skill, shape={"M": m, "N": n, "K": k}, wall_s=round(time.monotonic() - t0, 2),
                   flops=2 * m * n * k)
        if result.winner_ms:
            out["winner_tflops"] = 2 * m * n * k / (result.winner_ms * 1e-3) / 1e12
        self.launch, self.arrays = launch, (a, b, bias)
        del gen
        return out


def stage_ceilings(run: Run, torch) -> None:
    if run.cpu:
        run.summary["ceilings"] = "not measured: no GPU"
        return
    from kernelrag.verify.ceilings import get_ceilings

    data = get_ceilings(run.out / "home" / "cache", refresh=True)   # cached where the verifications look
    run.write("ceilings.json", data)
    run.summary["ceilings"] = {k: data.get(k) for k in ("copy_gbps", "bf16_tflops", "fp32_tflops")}
    run.summary["ceilings"]["fp32_paths"] = {p: {"tflops": v["tflops"], "rel_err": v["rel_err"]}
                                             for p, v in data["fp32_paths"].items()}


def gemm_size(run: Run, torch, tuner: Tuner, n: int, top_k: int, tunings: list) -> dict:
    """One size: tune the skill, then every path side by side with its error against fp64."""
    from bench.launch_overhead import host_us
    from kernelrag.verify.gemm_paths import measure_fp32_paths, rel_err

    tuned = tuner.tune("matmul_tf32x3", n, n, n, top_k=top_k)
    tunings.append(tuned)
    row = {"n": n, "paths": {}}
    if not run.cpu:
        row["paths"] = measure_fp32_paths(n, warmup=2, trials=10 if n < 8192 else 5)
    a, b, _ = tuner.arrays
    ref64 = a.double() @ b.double()
    winner = tuned["winner"]
    skill = tuner.modules["matmul_tf32x3"].matmul_tf32x3
    runs = {"skill_tf32x3": lambda: skill(a, b, config=winner),
            "skill_tf32x3_b_kmajor": lambda bb=b.t().contiguous().t(): skill(a, bb, config=winner),
            "template_tf32x3": lambda mm=template_gemm(run): mm(a, b)}
    side = side_by_side(torch, runs, a, b, n) if not run.cpu else {}
    for name, run_fn in runs.items():
        if side.get(name, {}).get("status", "ok") != "ok":   # a compile error: recorded, not timed
            row["paths"][name] = {k: side[name].get(k) for k in ("status", "detail")}
            continue
        stats = {k: v for k, v in side.get(name, {}).items() if k in ("median_ms", "iqr_ms", "trials")}
        if run.cpu:
            stats = {"median_ms": None, "note": "interpreter: correctness only"}
        out = run_fn()
        if not run.cpu:
            torch.cuda.synchronize()
        entry = {**stats, "rel_err": rel_err(out, ref64), "config": winner, "how": PATH_HOW[name]}
        if not run.cpu:
            entry["host_us"] = host_us(run_fn)
        if name == "template_tf32x3":
            entry["config"] = "the launcher's tile table"
        if stats.get("median_ms"):
            entry["tflops"] = 2 * n**3 / (stats["median_ms"] * 1e-3) / 1e12
        row["paths"][name] = entry
    # the ratio to cuBLAS fp32 is the one timed round-robin with these calls, one GPU state for all
    # (H100, 2026-12-07: timed in turn, the template read 1.89x at 8192^3 where the split survey of
    # the same call read 2.08x; round-robin, a later call's step read 2.09x against the survey's 2.11x)
    base_ms = side.get(CUBLAS_SIDE, {}).get("median_ms")
    if base_ms:
        row["paths"]["ieee_side_by_side"] = {
            **{k: side[CUBLAS_SIDE][k] for k in ("median_ms", "iqr_ms", "trials")},
            "tflops": 2 * n**3 / (base_ms * 1e-3) / 1e12, "how": PATH_HOW[CUBLAS_SIDE]}
    for name in (*runs, CUBLAS_SIDE, "ieee"):
        entry = row["paths"].get(name, {})
        if base_ms and entry.get("median_ms"):
            entry["x_cublas_fp32"] = base_ms / entry["median_ms"]
    ieee = row["paths"].get("ieee", {}).get("tflops")
    for name, entry in row["paths"].items():   # stage 1's own runs (cuBLAS TF32, the reference kernel)
        if "x_cublas_fp32" not in entry and ieee and entry.get("tflops"):
            entry["x_cublas_fp32"] = entry["tflops"] / ieee
    if not run.cpu:
        run.attempt(f"evidence-{n}", path_evidence, tuner, row)
    del a, b, ref64
    return row


CUBLAS_SIDE = "ieee_side_by_side"   # cuBLAS fp32 timed round-robin with the paths below
PATH_HOW = {
    "skill_tf32x3": "matmul_tf32x3 skill, tuned config, B as stored (one-pass transpose timed)",
    "skill_tf32x3_b_kmajor": "matmul_tf32x3 skill, tuned config, B given K-major (no transpose)",
    "template_tf32x3": "the lowering's GEMM template, 3xTF32 (on CUDA: B split into TF32 parts in one "
                       "timed pass, A too from N = 4096, else in the K loop)",
    CUBLAS_SIDE: "cuBLAS fp32 (TF32 off), timed round-robin with kernelrag's paths: their ratios' base",
}
GOAL_PATHS = ("skill_tf32x3", "template_tf32x3")   # kernelrag's fp32 GEMMs: the goal takes the faster


def side_by_side(torch, runs: dict, a, b, n: int) -> dict:
    """kernelrag's paths and cuBLAS fp32 timed round-robin (L2 flushed before each call, medians):
    ``{name: {"median_ms", "iqr_ms", "trials", ...}}``, cuBLAS fp32 under ``CUBLAS_SIDE``."""
    from kernelrag.verify.gemm_paths import cublas_precision
    from kernelrag.verify.tune import time_configs

    out = torch.empty(n, n, device=a.device, dtype=torch.float32)
    restore = cublas_precision(torch, "ieee")     # the Triton paths ignore cuBLAS's flags
    try:
        return time_configs({CUBLAS_SIDE: lambda: torch.matmul(a, b, out=out), **runs},
                            iters=20 if n < 8192 else 12)
    finally:
        restore()


def template_module(folder: Path):
    """(module, launcher) of the GEMM template rendered for a plain C = A @ B, loaded from a file
    written into ``folder`` (Triton reads a kernel's text from its file)."""
    from bench.rowwise_configs import load_module as load_source
    from kernelrag.draft.lower.gemm import render_gemm
    from kernelrag.draft.lower.gemm_spec import GemmSpec

    rendered = render_gemm(GemmSpec(name="mm"))
    module = load_source(rendered.source, folder / "mm_template.py")
    return module, getattr(module, rendered.entry)


def template_gemm(run: Run):
    """The GEMM template's launcher for a plain C = A @ B, rendered once per run."""
    if run.template is None:
        run.template = template_module(run.out)[1]
    return run.template


def goal_row(row: dict) -> dict:
    """The size's goal entry: the faster of kernelrag's fp32 GEMM paths, its ratio and error."""
    paths = [(name, row["paths"][name]) for name in GOAL_PATHS if name in row.get("paths", {})]
    name, best = max(paths, key=lambda p: p[1].get("x_cublas_fp32") or 0)
    speedup = best.get("x_cublas_fp32")
    return {"path": name, "x_cublas_fp32": speedup, "rel_err": best["rel_err"],
            "met": bool((speedup or 0) >= GOAL_SPEEDUP and best["rel_err"] <= GOAL_REL_ERR)}


def stage_gemm(run: Run, torch, tuner: Tuner, sizes: list[int]) -> None:
    rows, tunings = [], []
    for i, n in enumerate(sizes):
        if run.left() < 60 and i:
            rows.append({"n": n, "skipped": "time budget"})
            continue
        every = len(tuner.modules["matmul_tf32x3"].CONFIGS)   # the first size times every configuration
        row = run.attempt(f"gemm-{n}", gemm_size, run, torch, tuner, n, every if i == 0 else 4, tunings)
        rows.append({"n": n, **row})
        run.write("gemm.json", rows)
        if not run.cpu:
            torch.cuda.empty_cache()
    run.summary["gemm"] = [{"n": r["n"], **{p: {k: e.get(k) for k in ("tflops", "rel_err", "x_cublas_fp32")}
                                            for p, e in r.get("paths", {}).items()}} for r in rows]
    goal = [r for r in rows if any(name in r.get("paths", {}) for name in GOAL_PATHS)]
    run.summary["goal"] = {
        "target": f">= {GOAL_SPEEDUP}x cuBLAS fp32 at relative error <= {GOAL_REL_ERR:g}",
        "per_size": {str(r["n"]): goal_row(r) for r in goal}}
    run.tunings = tunings


PATH_TRANSFORMATIONS = {   # what each measured path tried, in the graph's vocabulary
    "tf32": ["tensor_cores"],
    "tf32x3": ["tensor_cores", "split_precision_tf32x3", "k_major_operands", "tiling", "grouped_ordering"],
    "skill_tf32x3": ["tensor_cores", "split_precision_tf32x3", "k_major_operands", "tiling", "grouped_ordering",
                     "autotuned_block_sizes"],
    "skill_tf32x3_b_kmajor": ["tensor_cores", "split_precision_tf32x3", "k_major_operands", "tiling",
                              "grouped_ordering", "autotuned_block_sizes"],
    "template_tf32x3": ["tensor_cores", "split_precision_tf32x3", "tf32_split_pass", "k_major_operands", "tiling",
                        "grouped_ordering"],
}


def path_evidence(tuner: Tuner, row: dict) -> None:
    """One graph record per precision path and layout, against cuBLAS fp32 (the fp32 task's
    eager reference): "success" when faster at fp32 tolerance, "slower", or "incorrect"
    when the error fails the fp32 tolerance (TF32), so the losing paths are evidence too."""
    ieee = row["paths"].get("ieee")
    if not ieee:
        return
    records = []
    for name, tids in PATH_TRANSFORMATIONS.items():
        e = row["paths"].get(name)
        if not e or not e.get("median_ms"):
            continue
        speedup = e.get("x_cublas_fp32") or ieee["median_ms"] / e["median_ms"]
        outcome = ("incorrect" if e["rel_err"] > CHECK_REL_ERR else "success" if speedup >= 1.0 else "slower")
        records.append(dict(
            pattern="matmul", transformations=tids, gpu=tuner.env["gpu"], outcome=outcome,
            speedup_vs_eager=float(f"{speedup:.4g}"), dtype="float32",
            regime={"input_shapes": [[row["n"]] * 2] * 2, "dtypes": ["float32", "float32"],
                    "output_shape": [row["n"]] * 2, "size_class": "large"},
            log_id=f"fp32-gemm-{tuner.env['date'][:10]}-{row['n']}", skill="matmul_tf32x3" if name.startswith("skill")
            else None, versions={"torch": tuner.env["torch"], "triton": tuner.env["triton"],
                                 "driver": tuner.env.get("driver")},
            detail=f"{name} ({e['how']}): {e['tflops']:.1f} TFLOP/s vs cuBLAS fp32 {ieee['tflops']:.1f}, "
                   f"relative error {e['rel_err']:.2g} (fp32 tolerance {CHECK_REL_ERR:g})",
            kernel_ms=e["median_ms"], variant=f"path:{name}", rel_err=e["rel_err"]))
    tuner.graph.record_many(records)


def stage_tuning(run: Run, tuner: Tuner, linear_shape: tuple[int, int, int], first_n: int) -> None:
    m, n, k = linear_shape
    results = list(getattr(run, "tunings", []))
    for skill in ("linear_relu_tf32x3", "linear_gelu_tanh_tf32x3", "linear_gelu_tf32x3"):
        if run.left() < 45:
            results.append({"skill": skill, "skipped": "time budget"})
            continue
        results.append({"skill": skill, **run.attempt(f"tune-{skill}", tuner.tune, skill, m, n, k, top_k=4)})
        run.write("tuning.json", results)
    again = {"skill": "matmul_tf32x3", **run.attempt("tune-repeat", tuner.tune, "matmul_tf32x3", first_n, first_n,
                                                     first_n, top_k=8)}   # same key: memory answers
    again["repeat_of_first_key"] = True
    results.append(again)
    run.write("tuning.json", results)
    run.summary["tuning"] = [{k: r.get(k) for k in ("skill", "shape", "winner", "winner_ms", "winner_tflops",
                                                      "from_cache", "reverified", "timed", "graph_records",
                                                      "wall_s", "skipped", "error")} for r in results]
    run.summary["evidence_records"] = write_evidence(run.out / "evidence-configs.jsonl", tuner.graph, tuner.seeded)


def write_evidence(path: Path, graph, seeded: set[str] = frozenset()) -> int:
    """The run's graph records (configurations, precision paths) in skills/evidence.jsonl's format;
    records already in the graph before the run (``seeded``: the shipped evidence) are left out."""
    records = [rec for edge in graph.g.edges(data=True) for rec in edge[2].get("records", [])
               if (rec.get("config") or str(rec.get("log_id", "")).startswith("fp32-gemm-"))
               and rec["rid"] not in seeded]
    unique = {rec["rid"]: rec for rec in records}
    with open(path, "w") as fh:
        for rec in sorted(unique.values(), key=lambda r: (r["pattern"], r["log_id"], r.get("config", ""),
                                                          r.get("variant", ""))):
            fh.write(json.dumps({k: v for k, v in rec.items() if k != "rid"}, sort_keys=True) + "\n")
    return len(unique)


def stage_verify(run: Run, tuner: Tuner) -> None:
    """Each new skill measured as ``kernelrag.bench.measure_skills`` measures seed skills (its
    kernel.py against its reference.py), with the ncu profile; ``measure-skills.jsonl`` is
    the file ``measure_skills --apply`` writes into skill.toml and skills/evidence.jsonl."""
    from kernelrag.bench.measure_skills import measure
    from kernelrag.memory.skills import SkillLibrary
    from kernelrag.verify import verify_source

    library = SkillLibrary(tuner.settings)
    verdicts: dict = {}

    def verify_fn(task: str, candidate: str, **options):
        t0 = time.monotonic()
        v = verify_source(Path(task).read_text(), Path(candidate).read_text(), profile=verdicts["profile"],
                          cache_dir=tuner.settings.cache_dir, **options)
        verdicts["last"] = (v, round(time.monotonic() - t0, 2))
        return v

    out = {}
    for i, skill in enumerate(SKILLS):
        verdicts["profile"] = i < PROFILED_SKILLS   # each profile recompiles in a fresh cache: bounded
        if run.left() < 50:
            out[skill] = {"skipped": "time budget"}
            continue
        verdicts.pop("last", None)
        result = run.attempt(f"verify-{skill}", measure, library.get(skill), verify_fn, device=run.device,
                             trials=5, timeout_s=min(240.0, max(30.0, run.left() - 10)))
        if "last" not in verdicts:
            out[skill] = result
            run.summary["verify"] = out
            continue
        with open(run.out / "measure-skills.jsonl", "a") as fh:
            fh.write(json.dumps(result, sort_keys=True) + "\n")
        v, wall = verdicts["last"]
        data = v.to_dict()
        data.update(skill=skill, verify_wall_s=wall, summary_line=v.summary(), feedback=v.feedback())
        run.write(f"verify-{skill}.json", data)
        out[skill] = {k: data.get(k) for k in ("status", "reason", "speedup_vs_eager", "speedup_vs_compile",
                                               "achieved_tflops", "frac_roofline", "ceiling", "precision",
                                               "rel_norm_err", "verify_wall_s")}
        out[skill]["profile_main"] = (v.profile or {}).get("main") or (v.profile or {}).get("note")
        run.summary["verify"] = out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="example: PYTHONPATH=. python3 bench/fp32_gemm.py --out /tmp/out")
    parser.add_argument("--out", required=True, help="directory for the results JSON files")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a dry run on tiny shapes under Triton's interpreter")
    parser.add_argument("--budget-s", type=float, default=300.0, help="start no new stage or skill after this many seconds (default 300)")
    parser.add_argument("--no-verify", action="store_true", help="skip stage 4 (the verifier runs)")
    parser.add_argument("--sizes", type=int, nargs="+", help="square sizes of stage 2 (default 2048 4096 8192)")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    import torch
    import triton

    if args.device == "cuda" and not torch.cuda.is_available():
        print("fp32_gemm: no CUDA device; run with --device cpu for a dry run", file=sys.stderr)
        return 2
    run = Run(out, args.device, args.budget_s)
    env = environment(torch, triton)
    run.summary["env"] = env
    run.write("env.json", env)
    sizes = args.sizes or ([48, 80] if run.cpu else [2048, 4096, 8192])
    linear = (64, 48, 80) if run.cpu else (8192, 4096, 4096)
    run.stage("ceilings", lambda: stage_ceilings(run, torch))
    tuner = Tuner(run, torch, triton, env)
    run.stage("gemm", lambda: stage_gemm(run, torch, tuner, sizes))
    run.stage("tuning", lambda: stage_tuning(run, tuner, linear, sizes[0]))
    if not args.no_verify:
        run.stage("verify", lambda: stage_verify(run, tuner))
    run.write("summary.json", run.summary)
    print(json.dumps(run.summary.get("goal", {}), indent=1))
    return 0 if all(s["status"] == "done" for s in run.summary["stages"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
