"""Host-side helpers the emitted launchers call, written once into a module that uses them.

A launcher's Python runs inside every timed call: the GPU waits for it between the L2 flush
and the first kernel. ``torch.broadcast_shapes`` (its tracing-aware checks), an
``expand(...).stride()`` view a tensor and ``triton.cdiv`` (a constexpr-function wrapper)
cost microseconds to tens of them a call, which a cooperative group norm's launcher paid
twenty times over against a 0.75 ms kernel. These plain functions give the same values.
"""
from __future__ import annotations

HELPERS = {
    "_broadcast": '''def _broadcast(*shapes):
    """The operands' broadcast shape: torch.broadcast_shapes' rule without its tracing checks."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for d, n in enumerate(s, rank - len(s)):
            if n != 1:
                if out[d] not in (1, n):
                    raise ValueError(f"operands shaped {[tuple(s) for s in shapes]} do not broadcast")
                out[d] = n
    return tuple(out)''',
    "_strides": '''def _strides(t, domain):
    """t's strides over domain, 0 along a broadcast dim: t.expand(domain).stride() without the view."""
    pad = len(domain) - t.dim()
    shape, stride = t.shape, t.stride()
    return tuple(0 if d < pad or (shape[d - pad] == 1 and domain[d] != 1) else stride[d - pad]
                 for d in range(len(domain)))''',
    "_wide": '''def _wide(*tensors):
    """Whether an element offset into any of ``tensors`` may pass 2**31 - 1 (int32 lanes would wrap)."""
    for t in tensors:
        reach = t.numel() if t.is_contiguous() else 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
        if reach >= 2**31:
            return True
    return False''',
    "_contiguous": '''def _contiguous(shape):
    """The strides of a contiguous tensor of ``shape`` (torch.empty(shape).stride() without the tensor)."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]''',
    "_launch": '''def _launch(pending, kernel, grid, args, **meta):
    """kernel[grid](*args, **meta) now, or queued on ``pending`` (a list) for the caller to launch
    later, back to back with its own kernels: nothing between them then waits on the host."""
    if pending is None:
        kernel[grid](*args, **meta)
    else:
        pending.append((kernel, grid, args, meta))''',
    "_cdiv": '''def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)''',
    "_pow2": '''def _pow2(n):
    """The least power of two >= n (0 for 0): triton.next_power_of_2 without its wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0''',
}


def used_helpers(texts: list[str]) -> list[str]:
    """The helper texts that any of ``texts`` (launchers, host-side tables) calls, in a fixed order."""
    return [text for name, text in HELPERS.items() if any(f"{name}(" in t for t in texts)]
