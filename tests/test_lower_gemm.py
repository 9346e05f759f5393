"""The GEMM / BMM template, rendered and run under Triton's interpreter against float64 PyTorch."""
from __future__ import annotations

import os
import types

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelrag.draft.lower.gemm import render_gemm
from kernelrag.draft.lower.gemm_spec import (GemmSpec, LoweringError, Step, Tri, row_reduce_code,
                                             steps_code)


def launcher(spec: GemmSpec):
    rendered = render_gemm(spec)
    module = types.ModuleType(f"gemm_{spec.name}")
    exec(compile(rendered.source, f"<{spec.name}>", "exec"), module.__dict__)
    return getattr(module, rendered.entry)


def check(spec, reference, *args, **kwargs):
    out = launcher(spec)(*args, **kwargs)
    ref = reference(*[a.double() for a in args])
    assert out.shape == ref.shape
    assert out.dtype == args[0].dtype
    err = (out.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    assert err < 1e-5, f"relative error {err:.3g}"


def mm(a, b):
    return a @ b


@pytest.mark.parametrize("a_shape,b_shape", [
    ((37, 21), (21, 45)),            # ragged tiles on every side
    ((3, 37, 21), (3, 21, 45)),      # bmm
    ((2, 3, 17, 21), (21, 19)),      # 4-D tensor times a matrix: folds into one tall GEMM
    ((2, 3, 17, 21), (3, 21, 19)),   # broadcast batch dim (stride 0)
    ((2, 2, 2, 9, 8), (8, 5)),       # three leading dims
    ((2, 1, 9, 8), (3, 8, 5)),       # both broadcast
])
def test_batched_and_broadcast_products(a_shape, b_shape):
    torch.manual_seed(0)
    check(GemmSpec(), mm, torch.randn(a_shape), torch.randn(b_shape))


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
def test_transposed_operands_are_stride_swaps_or_one_pass_transposes(ta, tb, precision):
    """tf32x3 makes both operands K-major first (transpose_kernel); the interpreter checks the indexing."""
    torch.manual_seed(1)
    a = torch.randn(29, 40).T if ta else torch.randn(40, 29)
    b = torch.randn(33, 29).T if tb else torch.randn(29, 33)
    check(GemmSpec(), mm, a, b, precision=precision)


def test_bmm_with_k_major_transposes():
    torch.manual_seed(2)
    check(GemmSpec(), mm, torch.randn(3, 20, 17).transpose(1, 2), torch.randn(3, 20, 17), precision="tf32x3")


@pytest.mark.parametrize("split_k", [2, 5])
def test_split_k_partials_sum_in_order(split_k):
    torch.manual_seed(3)
    check(GemmSpec(), mm, torch.randn(20, 300), torch.randn(300, 24), split_k=split_k)
    out1 = launcher(GemmSpec())(torch.ones(4, 64) / 3, torch.ones(64, 4) / 7, split_k=split_k)
    out2 = launcher(GemmSpec())(torch.ones(4, 64) / 3, torch.ones(64, 4) / 7, split_k=split_k)
    assert torch.equal(out1, out2)


@pytest.mark.parametrize("m,n,want", [(64, 64, 2), (352, 352, 2), (384, 384, 1)])
def test_default_split_k_only_below_one_wave_of_tiles(m, n, want):
    """K = 2048 splits across programs while the output's tiles (32 x 32 here) are fewer than 132, one
    wave of an H100's or H200's SMs: 4 and 121 tiles split in two, 144 run whole (from a full wave
    on, the partials' round trip through memory and the summing pass add work, not parallelism)."""
    run = launcher(GemmSpec())
    launches = []

    class Recorder:          # a kernel's launch noted (its grid and SPLIT_K), no program run
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.name, grid, kwargs.get("SPLIT_K")))

    run.__globals__[f"{run.__name__}_kernel"] = Recorder("mm")
    run.__globals__[f"{run.__name__}_splitk_kernel"] = Recorder("sum")
    run(torch.empty(m, 2048), torch.empty(2048, n))
    assert launches[0][0] == "mm" and launches[0][2] == want and launches[0][1][2] == want
    assert [name for name, _, _ in launches] == (["mm", "sum"] if want > 1 else ["mm"])


@pytest.mark.parametrize("b_shape,split_k", [((300, 1), None), ((300,), 3), ((2, 300, 1), 2)])
def test_matrix_vector(b_shape, split_k):
    torch.manual_seed(4)
    a = torch.randn(2, 37, 300) if len(b_shape) == 3 else torch.randn(37, 300)
    check(GemmSpec(vector=True), mm, a, torch.randn(b_shape), split_k=split_k)


def test_vector_times_matrix():
    torch.manual_seed(5)
    check(GemmSpec(), mm, torch.randn(30), torch.randn(30, 20))


def test_linear_bias_gelu_residual_epilogue():
    torch.manual_seed(6)
    spec = GemmSpec(name="linear_gelu_res", epilogue=steps_code((
        Step("add", ("acc", "e0")), Step("gelu", ("acc",), (("approximate", "tanh"),)), Step("add", ("acc", "e1")))),
        extra_rows=(False, False))
    x, w, bias, res = torch.randn(33, 40), torch.randn(24, 40), torch.randn(24), torch.randn(33, 24)
    ref = lambda x, wt, b, r: F.gelu(x @ wt + b, approximate="tanh") + r
    check(spec, ref, x, w.T, bias, res)              # w.T: nn.Linear's (N, K) weight is already K-major
    check(spec, ref, x, w.T, bias, res, split_k=2)   # the epilogue runs after the split-K sum


def test_row_scale_extra_is_a_row_value():
    torch.manual_seed(7)
    spec = GemmSpec(epilogue=steps_code((Step("mul", ("acc", "e0")), Step("clamp", ("acc", -1.0, 1.0)))),
                    extra_rows=(True,))
    check(spec, lambda a, b, s: torch.clamp((a @ b) * s, -1, 1), torch.randn(20, 16), torch.randn(16, 18),
          torch.randn(20, 1))


REDUCE_REFS = {"sum": lambda c: c.sum(-1), "mean": lambda c: c.mean(-1), "max": lambda c: c.amax(-1),
               "min": lambda c: c.amin(-1), "logsumexp": lambda c: torch.logsumexp(c, -1),
               "softmax": lambda c: torch.softmax(c, -1), "log_softmax": lambda c: torch.log_softmax(c, -1)}


@pytest.mark.parametrize("op", sorted(REDUCE_REFS))
@pytest.mark.parametrize("n", [1, 24, 300])
def test_row_reduction_fused_in_the_tile(op, n):
    torch.manual_seed(8)
    row = op not in ("softmax", "log_softmax")
    spec = GemmSpec(name=f"gemm_{op}", epilogue=steps_code((Step("mul", ("acc", 0.5)),)) + row_reduce_code(op),
                    whole_rows=True, row_out=row, squeeze_rows=row)
    check(spec, lambda a, b: REDUCE_REFS[op](0.5 * (a @ b)), torch.randn(2, 20, 16), torch.randn(2, 16, n))


def test_row_reduction_after_split_k():
    torch.manual_seed(9)
    spec = GemmSpec(epilogue=row_reduce_code("logsumexp"), whole_rows=True, row_out=True, squeeze_rows=True)
    check(spec, lambda a, b: torch.logsumexp(a @ b, -1), torch.randn(20, 64), torch.randn(64, 40), split_k=2)


def test_fused_row_reduction_refuses_rows_wider_than_a_tile():
    spec = GemmSpec(epilogue=row_reduce_code("sum"), whole_rows=True, row_out=True)
    with pytest.raises(ValueError, match="at most 1024 columns"):
        launcher(spec)(torch.randn(16, 16), torch.randn(16, 1100))


@pytest.mark.parametrize("kind", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_triangular_output_and_operands(kind, diagonal):
    torch.manual_seed(10)
    tri = getattr(torch, kind)
    check(GemmSpec(out_tri=Tri(kind, diagonal)), lambda a, b: tri(a @ b, diagonal),
          torch.randn(70, 70), torch.randn(70, 70))
    check(GemmSpec(a_tri=Tri(kind, diagonal), b_tri=Tri(kind, diagonal)),
          lambda a, b: tri(a, diagonal) @ tri(b, diagonal), torch.randn(70, 50), torch.randn(50, 66))
    check(GemmSpec(a_tri=Tri(kind, diagonal), vector=True), lambda a, b: tri(a, diagonal) @ b,
          torch.randn(70, 50), torch.randn(50, 1))


def test_triangular_output_skips_the_zero_tiles():
    source = render_gemm(GemmSpec(out_tri=Tri("tril"))).source
    assert "k_hi = tl.where(n_first > m_last + 0, k_lo, k_hi)" in source


def test_operand_prologue():
    torch.manual_seed(11)
    spec = GemmSpec(a_prologue=(Step("relu", ("acc",)),), b_prologue=(Step("mul", ("acc", 2.0)),))
    check(spec, lambda a, b: torch.relu(a) @ (2 * b), torch.randn(20, 30), torch.randn(30, 20))


def test_spec_errors_name_the_problem():
    with pytest.raises(LoweringError, match="tril or triu"):
        GemmSpec(out_tri=Tri("diag"))
    with pytest.raises(LoweringError, match="whole rows"):
        GemmSpec(row_out=True)
    with pytest.raises(LoweringError, match="not in the elementwise emitter"):
        GemmSpec(a_prologue=(Step("frobnicate", ("acc",)),))
    with pytest.raises(LoweringError, match="row reduction"):
        row_reduce_code("median")
    with pytest.raises(TypeError, match="one float dtype"):
        launcher(GemmSpec())(torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float64))


def test_rendered_module_says_its_precision_path():
    rendered = render_gemm(GemmSpec())
    assert any("tf32x3" in n and "ieee" in n for n in rendered.notes)
    assert 'input_precision=PRECISION' in rendered.source
    assert "tf32x3" in rendered.transformations


def test_16bit_products_take_the_tma_kernel_only_where_the_engine_can_fetch_them():
    """On CUDA a 16-bit product without a prologue or row reduction runs the persistent TMA
    kernel; tma_layout says which operand layouts it can fetch (K-contiguous A; B K- or
    N-contiguous, 16-byte pitches), and the CPU path never reaches it."""
    from kernelrag.draft.lower.gemm_kernels import tma_eligible

    plain = render_gemm(GemmSpec(name="mm"))
    assert "mm_tma_kernel[" in plain.source
    module = types.ModuleType("tma")
    exec(compile(plain.source, "<tma>", "exec"), module.__dict__)
    a = torch.randn(64, 32, dtype=torch.bfloat16)
    w = torch.randn(48, 32, dtype=torch.bfloat16)          # nn.Linear's [N, K] weight
    assert module.tma_layout(a, w.t()) is True
    assert module.tma_layout(a, torch.randn(32, 48, dtype=torch.bfloat16)) is False
    assert module.tma_layout(a.t().contiguous().t(), w.t()) is None     # A not K-contiguous
    odd = torch.randn(64, 33, dtype=torch.bfloat16)[:, :32]            # a 66-byte row pitch
    assert module.tma_layout(odd, w.t()) is None
    for spec in (GemmSpec(name="r", whole_rows=True, row_out=True, epilogue=row_reduce_code("sum")),
                 GemmSpec(name="t", a_tri=Tri("tril")), GemmSpec(name="p", a_prologue=(Step("relu", ("acc",)),))):
        assert not tma_eligible(spec) and f"{spec.name}_tma_kernel" not in render_gemm(spec).source
    module.mm_tma_kernel = None                                  # CPU: the tiled kernel runs, never this one
    assert module.mm(a, w.t()).shape == (64, 48)


@pytest.mark.parametrize("a_shape,b_shape,b_kmajor,want", [
    ((256, 64), (128, 64), True, ("tma", True)),        # nn.Linear's [N, K] weight: B fetched K-major
    ((1, 256, 64), (64, 128), False, ("tma", False)),   # a batch of one: a plain [M, K] product
    ((2, 256, 64), (2, 64, 128), False, ("tiled", None)),   # a bmm: the tiled kernel
])
def test_the_tma_branch_fetches_the_operands_as_stored(a_shape, b_shape, b_kmajor, want):
    """The CUDA-only branch, run here with ``cuda`` forced on and the kernels recorded: the
    descriptors cover A [M, K] and B ([N, K] or [K, N]) as the tensors lie in memory."""
    source = render_gemm(GemmSpec(name="mm")).source
    assert "cuda, fp32 = a.is_cuda," in source
    module = types.ModuleType("tma_branch")
    exec(compile(source.replace("cuda, fp32 = a.is_cuda,", "cuda, fp32 = True,"), "<tma>", "exec"), module.__dict__)
    launches = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.name, args, kwargs))

    module.mm_kernel, module.mm_tma_kernel = Recorder("tiled"), Recorder("tma")
    module.torch = types.SimpleNamespace(**{k: getattr(torch, k) for k in ("empty", "float32", "float16", "bfloat16")})
    module.torch.cuda = types.SimpleNamespace(get_device_properties=lambda d: types.SimpleNamespace(
        multi_processor_count=132))
    a = torch.randn(a_shape, dtype=torch.bfloat16)
    b = torch.randn(b_shape, dtype=torch.bfloat16)
    out = module.mm(a, b.transpose(-1, -2) if b_kmajor else b)
    assert out.shape == (a @ (b.transpose(-1, -2) if b_kmajor else b)).shape
    (name, args, kwargs), = launches
    assert (name, kwargs.get("B_NK")) == want
    if name == "tma":
        a_desc, b_desc = args[:2]
        assert (tuple(a_desc.shape), tuple(a_desc.strides)) == ((256, 64), (64, 1))
        assert (tuple(b_desc.shape), tuple(b_desc.strides)) == (((128, 64), (64, 1)) if b_kmajor else ((64, 128), (128, 1)))


@pytest.mark.parametrize("a_shape,b_shape,tb", [
    ((37, 21), (21, 45), False),          # ragged tiles, B N-major
    ((37, 21), (45, 21), True),           # nn.Linear's weight, already K-major
    ((2, 3, 17, 21), (3, 21, 19), False),  # broadcast batch dim: the parts follow B's expansion
    ((3, 37, 40), (3, 40, 45), False),    # bmm
])
def test_b_split_into_tf32_parts_before_the_kernel(a_shape, b_shape, tb):
    """SPLIT_B (the CUDA default for 3xTF32): B's TF32 parts made in one pass, A split in the
    kernel, three products a K step. Forced here, where the interpreter computes the dots in
    IEEE fp32, so a missing or misplaced part shows as an error near TF32's 1e-3."""
    torch.manual_seed(3)
    b = torch.randn(b_shape)
    b = b.transpose(-1, -2) if tb else b
    check(GemmSpec(), mm, torch.randn(a_shape), b, precision="tf32x3", split_b=True)
    check(GemmSpec(), mm, torch.randn(a_shape), b, precision="tf32x3", split_b=True, split_k=2)


@pytest.mark.parametrize("a_shape,b_shape,tb,splits", [
    ((37, 21), (21, 45), False, 2),          # ragged tiles: both operands split in a pass
    ((37, 21), (45, 21), True, 2),           # nn.Linear's weight
    ((2, 3, 17, 21), (21, 19), False, 2),    # leading dims fold into one tall A, which splits
    ((3, 37, 40), (3, 40, 45), False, 1),    # bmm: A is not one matrix, only B splits
    ((37, 70), (3, 70, 45), False, 2),       # one A, a batch of B: the pair launch walks three Bs
])
def test_a_split_too_where_it_is_one_matrix(a_shape, b_shape, tb, splits):
    """SPLIT_A: A's TF32 parts from the same pass as B's, loaded in the K loop beside A's TF32 part.
    The interpreter computes the dots in IEEE fp32, so a part lost or read at B's offsets shows
    as an error near TF32's 1e-3; the tensors split are counted, and A's and B's passes are one launch."""
    torch.manual_seed(5)
    b = torch.randn(b_shape)
    b = b.transpose(-1, -2) if tb else b
    a = torch.randn(a_shape)
    run = launcher(GemmSpec())
    one, pair, calls, launches = run.__globals__["tf32_parts"], run.__globals__["tf32_parts_pair"], [], []
    run.__globals__["tf32_parts"] = lambda t, *q: calls.append(t.shape) or launches.append("one") or one(t, *q)
    run.__globals__["tf32_parts_pair"] = (
        lambda x, y, *q: calls.extend([x.shape, y.shape]) or launches.append("pair") or pair(x, y, *q))
    for split_k in (1, 2):
        calls.clear()
        launches.clear()
        out = run(a, b, precision="tf32x3", split_b=True, split_a=True, split_k=split_k)
        ref = a.double() @ b.double()
        err = (out.double() - ref).abs().max().item() / ref.abs().max().item()
        assert err < 1e-5 and len(calls) == splits and len(launches) == 1, (err, calls, launches)


@pytest.mark.parametrize("n,first", [(48, "tf32_split_kernel"), (4096, "tf32_split_pair_kernel")])
def test_split_passes_launch_back_to_back_with_the_gemm(n, first):
    """The split passes are queued while the launcher plans and launched together with the GEMM,
    after every allocation and view: the GPU does not wait on the launcher's Python between them."""
    run = launcher(GemmSpec())
    g = run.__globals__
    events = []

    class Recorder:          # a kernel's launch noted, no program run
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: events.append(self.name)

    class TorchSpy:          # torch with its allocations noted
        def __getattr__(self, attr):
            value = getattr(torch, attr)
            if attr.startswith("empty"):
                return lambda *args, **kwargs: events.append("alloc") or value(*args, **kwargs)
            return value

    for kernel in ("tf32_split_kernel", "tf32_split_pair_kernel", f"{run.__name__}_kernel"):
        g[kernel] = Recorder(kernel)
    g["torch"] = TorchSpy()
    run(torch.empty(64, 32), torch.empty(32, n), precision="tf32x3", split_b=True)
    assert events[-2:] == [first, f"{run.__name__}_kernel"] and "alloc" in events[:-2], events


def test_the_pair_split_is_each_tensor_split_alone():
    """tf32_parts_pair's one grid hands each program one tile of one tensor: its parts equal
    tf32_parts' of each, on tiles ragged in both axes and a batched second tensor."""
    torch.manual_seed(6)
    run = launcher(GemmSpec())
    one, pair = run.__globals__["tf32_parts"], run.__globals__["tf32_parts_pair"]
    x, y = torch.randn(70, 45), torch.randn(2, 33, 100).transpose(-1, -2)
    for got, want in zip(pair(x, y), (one(x), one(y))):
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.stride() == w.stride() and torch.equal(g, w)


def test_a_split_is_the_default_only_for_wide_products_without_an_a_prologue():
    plain, with_a_prologue, with_a_tri = (render_gemm(spec).source for spec in (
        GemmSpec(), GemmSpec(a_prologue=(Step("relu", ("acc",)),)), GemmSpec(a_tri=Tri("tril"))))
    assert "split_a = True and N >= 4096" in plain
    assert "split_a = False and N >= 4096" in with_a_prologue and "split_a = False and N >= 4096" in with_a_tri


@pytest.mark.parametrize("kind", ["tril", "triu"])
def test_b_split_keeps_a_triangular_b(kind):
    tri = torch.tril if kind == "tril" else torch.triu
    torch.manual_seed(4)
    check(GemmSpec(b_tri=Tri(kind, 0)), lambda a, b: a @ tri(b), torch.randn(24, 40), torch.randn(40, 40),
          precision="tf32x3", split_b=True)


def test_b_split_is_the_cuda_default_only_where_b_has_no_prologue():
    plain, with_b_prologue = render_gemm(GemmSpec()).source, render_gemm(
        GemmSpec(b_prologue=(Step("relu", ("acc",)),))).source
    assert "split_b = cuda and True and N > 1" in plain
    assert "split_b = cuda and False and N > 1" in with_b_prologue


def _module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("split_a", [False, True])
def test_b_split_redoes_a_tile_where_an_inf_met_a_zero_part(split_a):
    """The split's fast loop leaves its small products unmasked: an inf in A or B meeting a zero
    TF32 part there (A exact in TF32 has a zero remainder) is 0 * inf = NaN where A @ B is inf.
    The kernel then redoes that tile with the mask and gets A @ B's infs and NaNs; without the
    redo the NaNs stay, which this test also shows, so it cannot pass by accident. Then an inf
    in B against an A that is not exact in TF32."""
    torch.manual_seed(6)
    a = torch.randn(40, 48)
    a = ((a.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)   # exact in TF32: a_lo = 0
    b = torch.randn(48, 36)
    a[2, 5] = float("inf")                      # row 2: +-inf
    b[7, 3] = float("-inf")                      # column 3: -+inf, and NaN where it meets row 2's inf
    b[9, 20] = float("nan")                      # column 20: NaN
    ref = a.double() @ b.double()
    source = render_gemm(GemmSpec(name="mm")).source
    outs = {}
    for redo in (True, False):
        text = source if redo else source.replace("MASK_NAN=True", "MASK_NAN=False")
        outs[redo] = _module(text, f"mm_redo_{redo}").mm(a, b, precision="tf32x3", split_b=True,
                                                         split_a=split_a).double()
    for redo, out in outs.items():
        same = torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))
        assert same is redo, f"redo={redo}: the NaN and inf pattern {'differs from' if redo else 'matches'} A @ B's"
    finite = ref.isfinite()
    assert torch.allclose(outs[True][finite], ref[finite], rtol=1e-5, atol=1e-5)
    # A not exact in TF32: b = inf meets a_lo, of a_hi's sign or the other. Masking only NaN left
    # -inf + inf = NaN in 20 of these 40 infs (tl.dot's own tf32x3 masks only NaN, but its
    # remainder of an inf is NaN, which poisons the whole small sum; tf32_parts' remainder is 0)
    a = torch.randn(40, 48)
    b = torch.randn(48, 36)
    b[7, 3] = float("inf")
    out = launcher(GemmSpec(name="mm"))(a, b, precision="tf32x3", split_b=True, split_a=split_a).double()
    ref = a.double() @ b.double()
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0)) and not out.isnan().any()
