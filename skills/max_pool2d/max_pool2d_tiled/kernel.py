"""2-D max pooling (NCHW) with one 2-D output tile per program.

Technique. The grid is (N * C planes, output-row tiles, output-column tiles).
Each program owns a BLOCK_H x BLOCK_W tile of one output plane and, for each of
the KH * KW window taps (unrolled at compile time), loads the matching strided
input tile and folds it into a running maximum. Taps that fall in the padding
or past the edge load -inf, which never wins a max, so borders need no
special case. Adjacent output columns read input columns STRIDE apart, so a
warp's loads of one tap cover a contiguous span of ~STRIDE * BLOCK_W pixels
and the next taps hit the same cache lines: DRAM sees each input byte about
once (the op is memory-bound: ~4 bytes in per pixel, no arithmetic to hide).

Window parameters are compile-time constants (one compiled kernel per pooling
layer); sizes and strides are runtime, so any N, C, H, W and layout works.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_H": 8, "BLOCK_W": 64}, num_warps=4),
        triton.Config({"BLOCK_H": 16, "BLOCK_W": 32}, num_warps=4),
        triton.Config({"BLOCK_H": 4, "BLOCK_W": 128}, num_warps=4),
    ],
    key=["OH", "OW"],
)
@triton.jit
def max_pool2d_kernel(
    x_ptr,  # input [N, C, H, W]
    y_ptr,  # output [N, C, OH, OW], same dtype
    C, H, W, OH, OW,  # channels, input height/width, output height/width
    stride_xn, stride_xc, stride_xh, stride_xw,  # element strides of x
    stride_yn, stride_yc, stride_yh, stride_yw,  # element strides of y
    KH: tl.constexpr, KW: tl.constexpr,  # window taps per side (unrolled)
    SH: tl.constexpr, SW: tl.constexpr,  # window step
    PH: tl.constexpr, PW: tl.constexpr,  # padding
    DH: tl.constexpr, DW: tl.constexpr,  # dilation: distance between taps
    BLOCK_H: tl.constexpr,  # output rows per program
    BLOCK_W: tl.constexpr,  # output columns per program
):
    pid_nc = tl.program_id(0)
    n = pid_nc // C
    c = pid_nc % C
    x_plane = x_ptr + n.to(tl.int64) * stride_xn + c.to(tl.int64) * stride_xc
    y_plane = y_ptr + n.to(tl.int64) * stride_yn + c.to(tl.int64) * stride_yc

    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    out_ok = (oh[:, None] < OH) & (ow[None, :] < OW)

    acc = tl.full([BLOCK_H, BLOCK_W], float("-inf"), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * SH - PH + kh * DH
        for kw in tl.static_range(KW):
            iw = ow * SW - PW + kw * DW
            ok = out_ok & ((ih >= 0) & (ih < H))[:, None] & ((iw >= 0) & (iw < W))[None, :]
            v = tl.load(x_plane + ih[:, None] * stride_xh + iw[None, :] * stride_xw, mask=ok, other=float("-inf"))
            acc = tl.maximum(acc, v.to(tl.float32))  # exact in any dtype: max only selects

    tl.store(y_plane + oh[:, None] * stride_yh + ow[None, :] * stride_yw,
             acc.to(y_ptr.dtype.element_ty), mask=out_ok)


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return (int(v[0]), int(v[1]))
    raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")


def max_pool2d(x: torch.Tensor, kernel_size, stride=None, padding=0, dilation=1) -> torch.Tensor:
    """nn.MaxPool2d semantics (ceil_mode=False) for a 4-D [N, C, H, W] tensor."""
    if x.ndim != 4:
        raise ValueError(f"need a 4-D [N, C, H, W] input, got shape {tuple(x.shape)}")
    KH, KW = _pair(kernel_size, "kernel_size")
    SH, SW = _pair(stride if stride is not None else kernel_size, "stride")
    PH, PW = _pair(padding, "padding")
    DH, DW = _pair(dilation, "dilation")
    if PH > KH // 2 or PW > KW // 2:
        raise ValueError(f"padding {padding} must be at most half of kernel_size {kernel_size} (as in PyTorch)")
    N, C, H, W = x.shape
    OH = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1
    OW = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1
    if OH <= 0 or OW <= 0:
        raise ValueError(f"input {H}x{W} is too small for the window (output would be {OH}x{OW})")
    y = torch.empty((N, C, OH, OW), device=x.device, dtype=x.dtype)
    grid = lambda meta: (N * C, triton.cdiv(OH, meta["BLOCK_H"]), triton.cdiv(OW, meta["BLOCK_W"]))
    max_pool2d_kernel[grid](
        x, y, C, H, W, OH, OW,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        y.stride(0), y.stride(1), y.stride(2), y.stride(3),
        KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, DH=DH, DW=DW,
    )
    return y


class ModelNew(nn.Module):
    """nn.MaxPool2d(kernel_size, stride, padding, dilation) through max_pool2d_kernel."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)
