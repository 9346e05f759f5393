"""LayerNorm forward with Welford statistics, one row per program.

    y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(var + eps)   (biased variance)

Technique: Welford's online mean and variance. Each lane of the program keeps its own
(mean, M2, count) while the program sweeps the row in BLOCK_N-column blocks, with no
cross-lane work inside the loop. After the sweep the BLOCK_N partials are merged in one
step with the many-group form of Chan's formula,

    mean = sum_i n_i * mean_i / n,    M2 = sum_i M2_i + sum_i n_i * (mean_i - mean)^2,

two tree reductions (tl.sum). The statistics therefore take a single read of the row and
are as stable as the two-pass formula (no catastrophic cancellation, unlike
sum(x^2)/n - mean^2 when |mean| >> std). A second sweep normalizes and applies the
affine weight and bias.

Traffic: x is read twice and y written once, 3 * numel * element_size bytes (the two-pass
variance needs a third read); for rows of a few thousand features the second read of a
row mostly hits L2. weight and bias are shared by all rows and stay in L2. fp32 math.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_welford_kernel(
    x_ptr,  # *T: input rows, contiguous (n_rows, n_cols)
    w_ptr,  # *T: weight, n_cols values shared by all rows
    b_ptr,  # *T: bias, n_cols values shared by all rows
    y_ptr,  # *T: output rows, contiguous (n_rows, n_cols)
    n_cols,  # normalized elements per row; the last block is masked
    eps,  # fp32: added to the variance before the reciprocal square root
    BLOCK_N: tl.constexpr,  # columns per loop step, a power of two
):
    row = tl.program_id(axis=0).to(tl.int64)  # int64: row * n_cols may exceed 2**31
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_N)

    # sweep 1 (one read): per-lane Welford updates, no cross-lane work inside the loop
    mean_l = tl.zeros([BLOCK_N], tl.float32)
    m2_l = tl.zeros([BLOCK_N], tl.float32)
    cnt_l = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        cnt_new = cnt_l + mask.to(tl.float32)  # lanes past the row end do not count
        delta = x - mean_l
        mean_l += tl.where(mask, delta / tl.maximum(cnt_new, 1.0), 0.0)
        m2_l += tl.where(mask, delta * (x - mean_l), 0.0)  # uses the old and the new mean
        cnt_l = cnt_new
    # merge the BLOCK_N lane partials at once; lanes that saw no column have n_i = 0 and drop out
    mean = tl.sum(cnt_l * mean_l, axis=0) / n_cols
    dev = mean_l - mean
    m2 = tl.sum(m2_l, axis=0) + tl.sum(cnt_l * dev * dev, axis=0)
    rstd = tl.rsqrt(m2 / n_cols + eps)

    # sweep 2 (second read, one write): normalize and apply the affine transform
    for start in range(0, n_cols, BLOCK_N):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm_welford(x: torch.Tensor, normalized_shape: tuple, weight: torch.Tensor,
                       bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm of x over its trailing `normalized_shape` dims, any leading shape."""
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if tuple(x.shape[x.dim() - k:]) != normalized_shape or x.dim() < k:
        raise ValueError(f"x shape {tuple(x.shape)} must end with normalized_shape {normalized_shape}")
    if tuple(weight.shape) != normalized_shape or tuple(bias.shape) != normalized_shape:
        raise ValueError(f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)} must be {normalized_shape}")
    n_cols = weight.numel()
    # each row is the flattened trailing dims; contiguous() is free when x already is
    x2 = x.contiguous().view(-1, n_cols) if n_cols else x.contiguous()
    y = torch.empty_like(x2)
    if x2.numel() == 0:
        return y.view(x.shape)
    w, b = weight.contiguous().view(-1), bias.contiguous().view(-1)
    # up to 4096 columns per step: 16 KiB of fp32 in flight per sweep step, bounded registers
    block_n = min(4096, triton.next_power_of_2(n_cols))
    num_warps = 8 if block_n >= 2048 else 4
    layer_norm_welford_kernel[(x2.shape[0],)](x2, w, b, y, n_cols, eps,
                                              BLOCK_N=block_n, num_warps=num_warps)
    return y.view(x.shape)


class ModelNew(nn.Module):
    """LayerNorm through layer_norm_welford_kernel; parameters named as in Model."""

    def __init__(self, normalized_shape: "int | tuple"):
        super().__init__()
        # nn.LayerNorm accepts an int for a single trailing dim; so do we
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(shape)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm_welford(x, self.normalized_shape, self.weight, self.bias, self.eps)
