"""transformations: one_row_per_program, fp32_accumulation

Sum over one dimension, the direct way: one program per output element walks its own
"row" of r values down the reduced axis. With x viewed as (outer, r, inner) those values
are `inner` elements apart, so for a middle-axis reduction every lane of every load
touches a different 32-byte sector and uses 4 of its bytes: up to 8x the useful DRAM
traffic unless neighbouring programs happen to share the sectors through L2. It also
launches outer * inner programs of tiny work each. The tiled kernel (kernel.py) reads
whole sectors instead. When the last dim is reduced (inner = 1) the rows are contiguous
and this layout is fine.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_row_kernel(
    x_ptr,  # *T: input, contiguous, viewed as (outer, r, inner)
    y_ptr,  # *T: output, contiguous (outer, inner)
    r,  # length of the reduced dimension
    inner,  # product of the dims after it: the stride between summed values
    BLOCK_R: tl.constexpr,  # values of the row loaded per step
):
    pid = tl.program_id(axis=0).to(tl.int64)  # one output element (o, i), flattened
    pid_o = pid // inner
    pid_i = pid % inner
    x_base = x_ptr + pid_o * r * inner + pid_i
    offs0 = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, r, BLOCK_R):
        rows = start + offs0
        # a strided gather: consecutive lanes are `inner` elements apart
        acc += tl.load(x_base + rows.to(tl.int64) * inner, mask=rows < r, other=0.0).to(tl.float32)
    tl.store(y_ptr + pid, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def sum_dim_rows(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Sum of a floating-point tensor over one dimension, one program per output."""
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"sum_dim_rows: dim {dim} out of range for a {x.dim()}-d tensor")
    dim = dim % x.dim()
    outer, r, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
    x3 = x.contiguous().view(outer, r, inner)
    y = torch.empty((outer, inner), dtype=x.dtype, device=x.device)
    out_shape = x.shape[:dim] + ((1,) if keepdim else ()) + x.shape[dim + 1:]
    if y.numel() == 0:
        return y.view(out_shape)
    block_r = min(1024, triton.next_power_of_2(max(r, 1)))
    sum_row_kernel[(outer * inner,)](x3, y, r, inner, BLOCK_R=block_r, num_warps=4)
    return y.view(out_shape)


class ModelNew(nn.Module):
    """Sum over `dim` with keepdim=True, one program per output element."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_dim_rows(x, self.dim, keepdim=True)
