"""transformations: vectorized_loads

The same chain, gelu(x * scale + bias) + residual, as three unfused Triton kernels: the
baseline that shows what elementwise fusion buys. Each kernel streams with vectorized
contiguous loads, but the intermediates go through DRAM:

    affine:    read x, write h                 2 tensors
    gelu:      read h, write g                 2 tensors
    add:       read g and residual, write y    3 tensors

7 tensors of traffic against 3 for the fused kernel, plus two extra allocations.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(
    x_ptr,  # *T: input, contiguous (n_rows, n_cols) flattened
    scale_ptr,  # *T: per-feature scale, n_cols values
    bias_ptr,  # *T: per-feature bias, n_cols values
    h_ptr,  # *T: output x * scale + bias
    numel,  # total elements
    n_cols,  # features per row, to find each element's feature
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < numel
    cols = offsets % n_cols  # a flat grid pays a modulo per element to find the feature
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    s = tl.load(scale_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask).to(tl.float32)
    tl.store(h_ptr + offsets, (x * s + b).to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_kernel(
    h_ptr,  # *T: input
    g_ptr,  # *T: output gelu(h)
    numel,  # total elements
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < numel
    h = tl.load(h_ptr + offsets, mask=mask).to(tl.float32)
    g = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(g_ptr + offsets, g.to(g_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_kernel(
    a_ptr,  # *T: first addend
    b_ptr,  # *T: second addend
    y_ptr,  # *T: output a + b
    numel,  # total elements
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < numel
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, (a + b).to(y_ptr.dtype.element_ty), mask=mask)


def scale_bias_gelu_residual_unfused(x, scale, bias, residual):
    """Three launches, two intermediate tensors."""
    n_cols = x.shape[-1]
    if residual.shape != x.shape or scale.shape != (n_cols,) or bias.shape != (n_cols,):
        raise ValueError(f"shapes x {tuple(x.shape)}, residual {tuple(residual.shape)}, "
                         f"scale {tuple(scale.shape)}, bias {tuple(bias.shape)} do not broadcast as (..., {n_cols})")
    x, residual = x.contiguous(), residual.contiguous()
    scale, bias = scale.contiguous(), bias.contiguous()
    h, g, y = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    numel = x.numel()
    if numel == 0:
        return y
    block_size = 1024
    grid = (triton.cdiv(numel, block_size),)
    affine_kernel[grid](x, scale, bias, h, numel, n_cols, BLOCK_SIZE=block_size, num_warps=4)
    gelu_kernel[grid](h, g, numel, BLOCK_SIZE=block_size, num_warps=4)
    add_kernel[grid](g, residual, y, numel, BLOCK_SIZE=block_size, num_warps=4)
    return y


class ModelNew(nn.Module):
    """gelu(x * scale + bias) + residual in three kernels; parameters named as in Model."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return scale_bias_gelu_residual_unfused(x, self.scale, self.bias, residual)
