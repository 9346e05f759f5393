"""FLOPs and bytes of one forward, for the roofline.

A task may declare ``get_flops()`` and ``get_bytes()`` (computed from its size
constants). Otherwise:

* bytes = every input tensor and parameter read once + every output written once;
  ``bytes_read`` (inputs, parameters, buffers) and ``bytes_written`` (outputs) split
  that sum for the roofline, which prices reads and writes apart. A declared task gets
  the split when its ``get_bytes()`` equals the counted sum; one whose declared bytes
  count something else (or that cannot run on meta) has no split (both None);
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
    bytes_read: int | None = None      # inputs + parameters + buffers; None: no split known
    bytes_written: int | None = None   # outputs; bytes_read + bytes_written == bytes_moved

    def to_dict(self) -> dict:
        return {"flops": self.flops, "bytes_moved": self.bytes_moved, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "source": self.source}


def count(mod: types.ModuleType) -> Counts:
    """Counts for the task module ``mod`` at the sizes its constants hold."""
    declared_flops = _declared(mod, "get_flops")
    declared_bytes = _declared(mod, "get_bytes")
    try:
        flops, read, written = _count_on_meta(mod)
    except Exception as exc:          # noqa: BLE001 - an uncountable task only loses its roofline
        if declared_flops is not None and declared_bytes is not None:
            return Counts(declared_flops, declared_bytes, "declared")       # no split: copy bandwidth
        return Counts(declared_flops, declared_bytes, f"not counted: {type(exc).__name__}: {exc}"[:200])
    if declared_bytes is not None and declared_bytes != read + written:
        read = written = None         # the declared bytes count something else: no split to price
    if declared_flops is not None and declared_bytes is not None:
        return Counts(declared_flops, declared_bytes, "declared", read, written)
    source = "counted" if declared_flops is None and declared_bytes is None else "mixed"
    return Counts(declared_flops if declared_flops is not None else flops,
                  declared_bytes if declared_bytes is not None else read + written, source, read, written)


def _declared(mod: types.ModuleType, name: str) -> int | None:
    fn = getattr(mod, name, None)
    return int(fn()) if callable(fn) else None


def _count_on_meta(mod: types.ModuleType) -> tuple[int, int, int]:
    """(FLOPs, bytes read, bytes written): the model and inputs built on the meta device
    (no memory, any size) and counted."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = mod.Model(*mod.get_init_inputs())
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        out = model(*inputs)
    outs, _ = flatten_outputs(out)
    weights = nbytes_of(list(model.parameters()) + list(model.buffers()))
    return int(counter.get_total_flops()), nbytes_of(inputs) + weights, nbytes_of(outs)
