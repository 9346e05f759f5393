"""What both worker processes need to agree on: inputs, parameters, output structure.

The reference process and the candidate process never exchange inputs or weights;
each regenerates them from ``(seed, distribution)`` with the functions here, and the
candidate side checks a digest of its inputs against the reference side's.

* Inputs: the task's ``get_inputs()`` under ``torch.manual_seed(seed)`` fixes shapes,
  dtypes and every non-floating input (targets, indices, masks keep the task's own
  generator). Floating inputs are then redrawn from the trial's distribution:
  ``task`` (as generated), ``normal``, ``uniform`` (+-1), ``heavy_tailed`` (Student-t,
  2 degrees of freedom, clipped) or ``large`` (normal x 1e3, x 1e2 for fp16). A
  ``+abs`` suffix takes absolute values, for tasks whose inputs must be >= 0.
* Parameters: every floating parameter and buffer of the reference ``Model`` is
  redrawn (not left at its default init: gamma=1 and beta=0 hide bugs). Tensors that
  were all positive (scales, variances) stay positive.
* Outputs: a tensor, or a (nested) tuple/list of tensors, flattened in order.
"""
from __future__ import annotations

import linecache
import math
import random
import types
from typing import Any

import torch

DISTRIBUTIONS = ("task", "normal", "uniform", "heavy_tailed", "large")


def pin_fp32_semantics() -> None:
    """The numerics every process of a verification runs under: fp32 means fp32 (no TF32 in
    cuBLAS or cuDNN; PyTorch turns cuDNN's on by default), so that eager PyTorch, the
    torch.compile baseline and the candidate are timed and compared on the same terms."""
    torch.set_default_dtype(torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def load_task(source: str, name: str) -> types.ModuleType:
    """Execute a task's source as a fresh module (task code is trusted)."""
    filename = f"<task {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = types.ModuleType(f"kernelrag_task_{name.replace('-', '_')}")
    mod.__file__ = filename
    exec(compile(source, filename, "exec"), mod.__dict__)
    return mod


def make_inputs(mod: types.ModuleType, seed: int, distribution: str, device: str) -> list[Any]:
    torch.manual_seed(seed)
    random.seed(seed)
    # Build the task's tensors on the device itself: KernelBench's get_inputs() calls
    # torch.randn(...) with no device, and drawing gigabytes on the CPU then copying
    # them over costs seconds per trial.
    with torch.device(device):
        raw = list(mod.get_inputs())
    gen = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
    out = []
    for x in raw:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point() and distribution != "task":
                x = _sample(distribution, x, gen)
        out.append(x)
    return out


def _sample(distribution: str, like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    name, _, mod = distribution.partition("+")
    shape, dev = like.shape, like.device
    half = like.dtype in (torch.float16,) or like.element_size() == 1
    if name == "normal":
        x = torch.randn(shape, generator=gen, device=dev)
    elif name == "uniform":
        x = torch.rand(shape, generator=gen, device=dev) * 2 - 1
    elif name == "heavy_tailed":
        z = torch.randn(shape, generator=gen, device=dev)
        u = torch.rand(shape, generator=gen, device=dev).clamp_min(1e-12)
        x = (z / torch.sqrt(-torch.log(u))).clamp(-(1e2 if half else 1e3), 1e2 if half else 1e3)
    elif name == "large":
        x = torch.randn(shape, generator=gen, device=dev) * (1e2 if half else 1e3)
    else:
        raise ValueError(f"unknown input distribution {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if mod == "abs":
        x = x.abs()
    return x.to(like.dtype)


def build_model(mod: types.ModuleType, seed: int, device: str) -> torch.nn.Module:
    """The reference Model with every floating parameter and buffer redrawn from ``seed``.

    Left in the default (training) mode, as KernelBench runs it: BatchNorm normalises
    with the batch's statistics, which is the computation the candidate must match.

    Built and redrawn on ``device`` itself: on the CPU, a 4096x4096 linear layer took about
    a second to initialise and redraw in float64 (this 2-core machine), once per trial in both
    processes, while the GPU was held for the trials. Every process of a verification builds
    on the same device with the same seeds, so their parameters agree.
    """
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = mod.Model(*mod.get_init_inputs())
    except Exception:   # noqa: BLE001 - an __init__ that needs the CPU: built there, in every process alike
        torch.manual_seed(seed)
        model = mod.Model(*mod.get_init_inputs())
    model = model.to(device)
    randomise_parameters(model, seed)
    return model


def randomise_parameters(model: torch.nn.Module, seed: int) -> int:
    """Redraw every floating parameter and buffer from ``seed``, on the device it lives on:
    positive ones (scales, variances) log-normally around their mean, the rest normally with
    their spread."""
    gens: dict[torch.device, torch.Generator] = {}
    count = 0
    with torch.no_grad():
        for _, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            if t.device not in gens:
                gens[t.device] = torch.Generator(device=t.device).manual_seed(seed ^ 0xB1A5)
            gen = gens[t.device]
            d = t.detach().to(torch.float64)
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float64, device=t.device)
            if bool((d > 0).all()):
                new = d.mean() * torch.exp(0.5 * noise)          # positive scales stay positive
            else:
                std = float(d.std()) if d.numel() > 1 else 0.0
                new = noise * (std if std > 0 else max(abs(float(d.mean())), 1.0))
            t.copy_(new.to(t.dtype))
            count += 1
    return count


def flatten_outputs(out: Any) -> tuple[list[Any], str]:
    """The tensors of a forward's result in order, and a problem ("" when fine)."""
    if isinstance(out, (tuple, list)):
        flat: list[Any] = []
        for item in out:
            sub, problem = flatten_outputs(item)
            if problem:
                return [], problem
            flat += sub
        return flat, ""
    if isinstance(out, torch.Tensor):
        return [out], ""
    return [], f"forward returned {type(out).__name__}, expected a torch.Tensor or a tuple of them"


def structure(outs: list[torch.Tensor]) -> list[dict[str, Any]]:
    return [{"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch."), "device": o.device.type}
            for o in outs]


def output_problems(outs: list[Any], expected: list[dict[str, Any]]) -> list[str]:
    """Why the candidate's outputs do not have the reference's structure (empty: they do)."""
    if len(outs) != len(expected):
        return [f"returned {len(outs)} tensors, expected {len(expected)}"]
    problems = []
    for i, (o, e) in enumerate(zip(outs, expected)):
        tag = f"output {i}" if len(outs) > 1 else "output"
        if type(o) is not torch.Tensor:
            problems.append(f"{tag} is a {type(o).__module__}.{type(o).__name__}, not a plain torch.Tensor")
            continue
        if list(o.shape) != e["shape"]:
            problems.append(f"{tag} shape {list(o.shape)} != expected {e['shape']}")
        if str(o.dtype).removeprefix("torch.") != e["dtype"]:
            problems.append(f"{tag} dtype {o.dtype} != expected torch.{e['dtype']}")
        if o.device.type != e["device"]:
            problems.append(f"{tag} is on {o.device}, expected {e['device']}")
        if o.is_meta or (o.numel() and not _has_storage(o)):
            problems.append(f"{tag} has no real storage behind it")
    return problems


def _has_storage(t: torch.Tensor) -> bool:
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return False
    if t.data_ptr() == 0:
        return False
    extent = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    return storage.nbytes() >= (t.storage_offset() + extent) * t.element_size()


def digest(values: list[Any]) -> list[float]:
    """A cheap fingerprint of inputs, to confirm both processes generated the same ones."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            d = v.detach().double()
            out += [float(d.sum()), float(d.abs().sum())]
        else:
            out.append(float(v) if isinstance(v, (int, float)) else 0.0)
    return out


def digests_match(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12)
                                    for x, y in zip(a, b))


def set_poison_fill(on: bool) -> None:
    """With ``on``, torch.empty and friends return NaN-filled memory, so unwritten outputs show.

    Sets the C++ flag directly: ``torch.use_deterministic_algorithms`` also imports
    torch._inductor (seconds of start-up) to set an inductor option we do not need.
    """
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is not None:
        setter(on, warn_only=True)
    else:
        torch.use_deterministic_algorithms(on, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = on


def poison_cuda_cache(nbytes: int) -> None:
    """Fill a block of the CUDA caching allocator with NaN and free it back to the cache."""
    if not torch.cuda.is_available() or nbytes <= 0:
        return
    block = torch.empty(nbytes // 4 + 1024, dtype=torch.float32, device="cuda")
    block.fill_(float("nan"))
    del block


def nbytes_of(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def load_reference_state(model: torch.nn.Module, state: dict[str, Any]) -> tuple[list[str], str | None]:
    """Copy the reference's (randomised) parameters and buffers into ``model``.

    Returns (problems, note). Names must match, with one exception: when both sides
    hold the same number of tensors with the same shapes in the same order (a skill
    naming its weight ``weight`` where the task wraps it as ``ln.weight``), they are
    copied by position and the note says so. The values are random, so a wrong pairing
    cannot pass the comparison that follows.
    """
    mine = model.state_dict()
    if set(mine) == set(state):
        model.load_state_dict(state, strict=True)
        return [], None
    theirs = list(state.items())
    ours = list(mine.items())
    if len(ours) == len(theirs) and all(a.shape == b.shape for (_, a), (_, b) in zip(ours, theirs)):
        model.load_state_dict({k: v for (k, _), (_, v) in zip(ours, theirs)}, strict=True)
        pairs = ", ".join(f"{a}<-{b}" for (a, _), (b, _) in zip(ours, theirs))
        return [], f"parameters copied by position: {pairs}"
    missing = sorted(set(state) - set(mine))
    unexpected = sorted(set(mine) - set(state))
    return [f"ModelNew's parameters differ from Model's: missing {missing}, unexpected {unexpected}; "
            "keep the reference's parameter names and shapes"], None
