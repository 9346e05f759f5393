"""ReLU as a CUDA C++ kernel compiled with torch.utils.cpp_extension.load_inline.

    y = max(x, 0)

Technique: the tensor is one flat contiguous fp32 array. Each thread moves 16 bytes per
step with float4 loads and stores (one 128-bit LDG/STG instead of four 32-bit ones), in
a grid-stride loop: the grid is one wave of resident blocks (every SM full) and each
thread walks the array in steps of the whole grid, so any size works without launching
more blocks than the GPU can hold. The float4 path needs 16-byte aligned pointers; the
launcher checks and otherwise runs every element through the scalar path, which also
handles the last numel % 4 elements. Each element is read once and written once: the
kernel is memory-bound at 2 * numel * 4 bytes, and the goal is full DRAM bandwidth.

NaN passes through, as in torch.relu, because the select tests x < 0 rather than taking
fmaxf(x, 0), which drops a NaN. The extension is compiled once per process, when the
first ModelNew is built, for the GPU present (sm_90 on Hopper), with IEEE math.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# the binding load_inline generates: Python calls relu_forward(x) -> y
CPP_SOURCE = "torch::Tensor relu_forward(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <algorithm>
#include <cstdint>
// c10 headers only: ATen/cuda/CUDAContext.h would also pull in the cuBLAS/cuSPARSE headers
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// 8 warps per block: 2048 resident threads per SM on Hopper means 8 blocks per SM
constexpr int kThreads = 256;

__device__ __forceinline__ float relu_one(float v) {
    // a compare-select, not fmaxf(v, 0.f): fmaxf returns 0 for NaN, torch.relu keeps NaN
    return v < 0.0f ? 0.0f : v;
}

__global__ void __launch_bounds__(kThreads) relu_kernel(
    const float* __restrict__ x,  // input, contiguous, n floats
    float* __restrict__ y,        // output, contiguous, n floats
    int64_t n,                    // element count, any value
    int64_t n_vec)                // float4 groups on the vector path: n / 4, or 0 if a pointer is unaligned
{
    // int64 indices: tensors of more than 2**31 elements exist, and int32 would wrap
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    // body: one 16-byte load and one 16-byte store per step; neighbouring threads touch
    // neighbouring 16 bytes, so a warp moves 512 contiguous bytes per instruction
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = first; i < n_vec; i += stride) {
        float4 v = x4[i];
        v.x = relu_one(v.x);
        v.y = relu_one(v.y);
        v.z = relu_one(v.z);
        v.w = relu_one(v.w);
        y4[i] = v;
    }
    // tail: the last n % 4 elements, or all n of them when the vector path is off
    for (int64_t i = 4 * n_vec + first; i < n; i += stride) {
        y[i] = relu_one(x[i]);
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor, got device ", x.device());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: x must be float32, got ", x.scalar_type());
    TORCH_CHECK(x.is_contiguous(), "relu_forward: x must be contiguous; pass x.contiguous()");
    const c10::cuda::CUDAGuard device_guard(x.device());  // launch on x's GPU, not the current one
    torch::Tensor y = torch::empty(x.sizes(), x.options());
    const int64_t n = x.numel();
    if (n == 0) {
        return y;  // a grid of 0 blocks is a launch error
    }
    const float* x_ptr = x.data_ptr<float>();
    float* y_ptr = y.data_ptr<float>();
    // float4 accesses must be 16-byte aligned; torch's allocator aligns every block, but a
    // contiguous view can start at any element (x.view(-1)[1:] starts 4 bytes in)
    const bool aligned = reinterpret_cast<std::uintptr_t>(x_ptr) % 16 == 0
                      && reinterpret_cast<std::uintptr_t>(y_ptr) % 16 == 0;
    const int64_t n_vec = aligned ? n / 4 : 0;
    // threads wanted for one step each of the longer loop, capped at one wave of resident
    // blocks: more blocks would only queue behind the first wave
    const int64_t steps = std::max(n_vec, n - 4 * n_vec);
    int sms = 0, threads_per_sm = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, x.get_device()));
    const int64_t wave = (int64_t)sms * (threads_per_sm / kThreads);
    const int blocks = (int)std::min((steps + kThreads - 1) / kThreads, wave);
    // the current stream: the caller's ordering and timing see this launch
    relu_kernel<<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(x_ptr, y_ptr, n, n_vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_relu_ext = None  # the compiled extension, built once per process by load_relu_extension()


def load_relu_extension():
    """Compile CUDA_SOURCE for this GPU (once per process; torch keeps the build on disk)."""
    global _relu_ext
    if _relu_ext is None:
        if not torch.cuda.is_available():
            raise RuntimeError("relu_cuda: no CUDA GPU is visible; this skill is CUDA C++ and runs only on a GPU")
        # build for the GPU present (sm_90 on an H200) rather than every architecture torch knows
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
        _relu_ext = load_inline(
            name=f"kernelrag_relu_cuda_sm{arch}",  # one build directory per skill and architecture
            cpp_sources=CPP_SOURCE,
            cuda_sources=CUDA_SOURCE,
            functions=["relu_forward"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],  # no fast math
        )
    return _relu_ext


def relu_cuda(x: torch.Tensor) -> torch.Tensor:
    """Return relu(x) for a contiguous float32 CUDA tensor of any shape, as a new tensor."""
    if _relu_ext is None:
        raise RuntimeError("relu_cuda: the CUDA extension is not built; call load_relu_extension() first "
                           "(ModelNew() does)")
    if not x.is_cuda:
        raise ValueError(f"relu_cuda: x is on {x.device}; this kernel runs on a CUDA GPU, pass x.cuda()")
    if x.dtype != torch.float32:
        raise TypeError(f"relu_cuda: x is {x.dtype}; this kernel reads float32 only, pass x.float()")
    if not x.is_contiguous():
        raise ValueError(f"relu_cuda: x of shape {tuple(x.shape)} has strides {x.stride()}, not contiguous; "
                         "pass x.contiguous()")
    return _relu_ext.relu_forward(x)


class ModelNew(nn.Module):
    """ReLU through relu_kernel; same constructor as the reference Model."""

    def __init__(self):
        super().__init__()
        # compile here (tens of seconds the first time) so that forward only launches
        load_relu_extension()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_cuda(x)
