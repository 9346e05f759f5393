"""Fused scale, bias, exact GELU and residual add in one Triton kernel.

    y = gelu(x * scale + bias) + residual        scale, bias: (dim,) per-feature vectors

Technique: elementwise fusion. Run as four PyTorch ops the chain moves 9 full tensors
through DRAM (mul: read x, write t; add: read t, write t; gelu: read t, write t; add: read
t and residual, write y; plus an allocation each). Fused, each element is read from x and
residual once and written once: 3 tensors, so the kernel is memory-bound at about
3 * numel * element_size bytes, a third of eager's traffic.

The grid is two-dimensional, (rows, column blocks): a program knows its feature indices
directly, without a per-element modulo, and its scale/bias slice is one contiguous load
that every row shares (it stays in L2, so it costs no DRAM traffic after the first row).
Math is fp32 whatever the storage type.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_gelu_residual_kernel(
    x_ptr,  # *T: input activations, contiguous (n_rows, n_cols)
    res_ptr,  # *T: residual, contiguous, same shape as x
    scale_ptr,  # *T: per-feature scale, n_cols values
    bias_ptr,  # *T: per-feature bias, n_cols values
    y_ptr,  # *T: output, same shape as x
    n_cols,  # features per row (the last dimension); the last column block is masked
    BLOCK_N: tl.constexpr,  # columns per program, a power of two
):
    row = tl.program_id(axis=0).to(tl.int64)  # int64: n_rows * n_cols may exceed 2**31
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    offsets = row * n_cols + cols
    # the (BLOCK_N,) slices of scale and bias are the same for every row: L2 hits after the first
    scale = tl.load(scale_ptr + cols, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=mask).to(tl.float32)
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    res = tl.load(res_ptr + offsets, mask=mask).to(tl.float32)
    # the whole chain stays in registers: no intermediate tensor is ever written
    h = x * scale + bias
    g = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))  # exact GELU; 1/sqrt(2) as a multiply
    y = g + res
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def scale_bias_gelu_residual(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor,
                             residual: torch.Tensor) -> torch.Tensor:
    """Return gelu(x * scale + bias) + residual; scale and bias broadcast over the last dim."""
    n_cols = x.shape[-1]
    if residual.shape != x.shape:
        raise ValueError(f"residual shape {tuple(residual.shape)} must equal x shape {tuple(x.shape)}")
    if scale.shape != (n_cols,) or bias.shape != (n_cols,):
        raise ValueError(f"scale {tuple(scale.shape)} and bias {tuple(bias.shape)} must both be ({n_cols},)")
    # row-major flat indexing needs dense layouts; contiguous() is free when they already are
    x, residual = x.contiguous(), residual.contiguous()
    scale, bias = scale.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    n_rows = x.numel() // n_cols if n_cols else 0
    if n_rows == 0 or n_cols == 0:
        return y
    # 1024 columns over 4 warps: 8 fp32 per thread per tensor, two 16-byte loads each
    block_n = min(1024, triton.next_power_of_2(n_cols))
    # rows on grid axis 0 (limit 2**31 - 1); column blocks on axis 1 (limit 65535, ample)
    grid = (n_rows, triton.cdiv(n_cols, block_n))
    scale_bias_gelu_residual_kernel[grid](x, residual, scale, bias, y, n_cols,
                                          BLOCK_N=block_n, num_warps=4)
    return y


class ModelNew(nn.Module):
    """gelu(x * scale + bias) + residual in one fused kernel; parameters named as in Model."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return scale_bias_gelu_residual(x, self.scale, self.bias, residual)
