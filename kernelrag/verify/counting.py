"""FLOPs and bytes of one forward, for the roofline.

A task may declare ``get_flops()`` and ``get_bytes()`` (computed from its size
constants). Otherwise:

* bytes = every input tensor and parameter read once + every output written once;
* flops = what ``torch.utils.flop_counter.FlopCounterMode`` counts while the
  reference runs on the ``meta`` device (no real compute, any size). It counts
  matmuls, convolutions and attention; elementwise and reduction ops count 0,
  which correctly makes such tasks memory-bound on the roofline.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

import torch

from kernelrag.verify.correctness import flatten_outputs, nbytes_of


@dataclass
class Counts:
    flops: int | None
    bytes_moved: int | None
    source: str                 # "declared", "counted", "mixed" or why nothing was counted

    def to_dict(self) -> dict:
        return {"flops": self.flops, "bytes_moved": self.bytes_moved, "source": self.source}


def count(mod: types.ModuleType) -> Counts:
    """Counts for the task module ``mod`` at the sizes its constants hold."""
    declared_flops = _declared(mod, "get_flops")
    declared_bytes = _declared(mod, "get_bytes")
    if declared_flops is not None and declared_bytes is not None:
        return Counts(declared_flops, declared_bytes, "declared")
    try:
        flops, bytes_moved = _count_on_meta(mod)
    except Exception as exc:          # noqa: BLE001 - an uncountable task only loses its roofline
        return Counts(declared_flops, declared_bytes, f"not counted: {type(exc).__name__}: {exc}"[:200])
    source = "counted" if declared_flops is None and declared_bytes is None else "mixed"
    return Counts(declared_flops if declared_flops is not None else flops,
                  declared_bytes if declared_bytes is not None else bytes_moved, source)


def _declared(mod: types.ModuleType, name: str) -> int | None:
    fn = getattr(mod, name, None)
    return int(fn()) if callable(fn) else None


def _count_on_meta(mod: types.ModuleType) -> tuple[int, int]:
    """Build the model and inputs on the meta device (no memory, any size) and count."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = mod.Model(*mod.get_init_inputs())
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        out = model(*inputs)
    outs, _ = flatten_outputs(out)
    weights = nbytes_of(list(model.parameters()) + list(model.buffers()))
    return int(counter.get_total_flops()), nbytes_of(inputs) + weights + nbytes_of(outs)
