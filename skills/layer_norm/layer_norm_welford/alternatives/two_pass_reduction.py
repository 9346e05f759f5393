"""transformations: two_pass_reduction, one_row_per_program, fp32_accumulation

LayerNorm forward with the two-pass variance (the Triton tutorial's layout): sweep 1 sums
the row for the mean, sweep 2 sums (x - mean)^2 for the variance, sweep 3 normalizes and
applies weight and bias. As stable as Welford, but x is read three times:
4 * numel * element_size bytes against 3 for the Welford kernel.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_two_pass_kernel(
    x_ptr,  # *T: input rows, contiguous (n_rows, n_cols)
    w_ptr,  # *T: weight, n_cols values
    b_ptr,  # *T: bias, n_cols values
    y_ptr,  # *T: output rows, contiguous
    n_cols,  # normalized elements per row
    eps,  # fp32: added to the variance
    BLOCK_N: tl.constexpr,  # columns per loop step, a power of two
):
    row = tl.program_id(axis=0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_N)

    # sweep 1: mean (per-lane partial sums, one reduction at the end)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        offs = start + cols
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols

    # sweep 2: variance from centred values, so no cancellation
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)  # masked lanes would otherwise add mean^2
        acc += xc * xc
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)

    # sweep 3: normalize and write
    for start in range(0, n_cols, BLOCK_N):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
        tl.store(y_row + offs, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm_two_pass(x, normalized_shape, weight, bias, eps):
    """LayerNorm of x over its trailing `normalized_shape` dims, any leading shape."""
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k:]) != normalized_shape:
        raise ValueError(f"x shape {tuple(x.shape)} must end with normalized_shape {normalized_shape}")
    n_cols = weight.numel()
    x2 = x.contiguous().view(-1, n_cols) if n_cols else x.contiguous()
    y = torch.empty_like(x2)
    if x2.numel() == 0:
        return y.view(x.shape)
    block_n = min(4096, triton.next_power_of_2(n_cols))
    num_warps = 8 if block_n >= 2048 else 4
    w, b = weight.contiguous().view(-1), bias.contiguous().view(-1)
    layer_norm_two_pass_kernel[(x2.shape[0],)](x2, w, b, y, n_cols, eps,
                                               BLOCK_N=block_n, num_warps=num_warps)
    return y.view(x.shape)


class ModelNew(nn.Module):
    """LayerNorm with three sweeps per row; parameters named as in Model."""

    def __init__(self, normalized_shape: "int | tuple"):
        super().__init__()
        # nn.LayerNorm accepts an int for a single trailing dim; so do we
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm_two_pass(x, self.normalized_shape, self.weight, self.bias, self.eps)
