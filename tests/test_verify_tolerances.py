"""The tolerance table and the comparison every check uses."""
from __future__ import annotations

import pytest
import torch

from kernelrag.verify.tolerances import TOLERANCES, compare, slack_of, tolerance_for

FP32 = TOLERANCES["float32"]


def test_fp32_rounding_of_an_fp64_reference_passes():
    ref = torch.randn(64, 257, dtype=torch.float64)
    assert compare(ref.float(), ref, FP32).passed


def test_bf16_downcast_fails_the_fp32_row():
    ref = torch.randn(64, 257, dtype=torch.float64)
    result = compare(ref.bfloat16().float(), ref, FP32)
    assert not result.passed and result.mismatch_count > 0 and result.rel_norm_err > 1e-3


def test_tf32_like_error_fails_fp32_and_passes_tf32_row():
    ref = torch.randn(128, 128, dtype=torch.float64)
    noisy = ref * (1 + 4e-4 * torch.randn_like(ref))
    assert not compare(noisy, ref, FP32).passed
    assert compare(noisy, ref, TOLERANCES["tf32"]).passed


def test_zeros_fail_on_a_tiny_output():
    """A softmax over 32768 columns has values ~3e-5: a fixed atol of 1e-2 would let zeros pass."""
    ref = torch.softmax(torch.randn(4, 32768, dtype=torch.float64), dim=1)
    assert torch.allclose(torch.zeros_like(ref), ref, atol=1e-2)      # the classic check is fooled
    result = compare(torch.zeros_like(ref), ref, FP32)
    assert not result.passed and result.rel_norm_err == pytest.approx(1.0)


def test_nan_positions_must_agree():
    ref = torch.randn(10, dtype=torch.float64)
    ref[3] = float("nan")
    out = ref.clone()
    assert compare(out, ref, FP32).passed
    out[3], out[5] = 0.0, float("nan")
    result = compare(out, ref, FP32)
    assert not result.passed and result.nonfinite_mismatch == 2
    inf_ref = torch.tensor([float("inf"), 1.0], dtype=torch.float64)
    assert not compare(torch.tensor([float("-inf"), 1.0]), inf_ref, FP32).passed


def test_report_gives_count_errors_and_first_bad_indices():
    ref = torch.zeros(4, 8, dtype=torch.float64) + 1.0
    out = ref.clone()
    out[2, 5] = 3.0
    out[3, 1] = -1.0
    result = compare(out, ref, FP32)
    assert result.mismatch_count == 2
    assert result.first_bad_indices == [[2, 5], [3, 1]]
    assert result.max_abs_err == pytest.approx(2.0) and result.max_rel_err == pytest.approx(2.0)
    assert "2/32 elements out of tolerance" in result.describe()


def test_shape_mismatch_is_a_problem_not_a_crash():
    result = compare(torch.zeros(3), torch.zeros(4, dtype=torch.float64), FP32)
    assert not result.passed and "shape" in result.problem


def test_integer_outputs_must_match_exactly():
    ref = torch.tensor([1, 2, 3])
    tol = tolerance_for(ref.dtype)
    assert compare(ref.clone(), ref, tol).passed
    assert not compare(torch.tensor([1, 2, 4]), ref, tol).passed


def test_table_lookup_and_overrides():
    assert tolerance_for(torch.float32) is FP32
    assert tolerance_for(torch.bfloat16).key == "bfloat16"
    assert tolerance_for(torch.float32, "tf32").key == "tf32"
    custom = tolerance_for(torch.float32, {"atol": 1e-3, "rtol": 1e-3})
    assert custom.atol == 1e-3 and custom.rel_norm >= FP32.rel_norm
    with pytest.raises(ValueError, match="valid"):
        tolerance_for(torch.float32, "loose")
    with pytest.raises(ValueError, match="unknown tolerance fields"):
        tolerance_for(torch.float32, {"atoll": 1.0})


def test_calibrated_tolerance_widens_only_where_pytorch_itself_is_off():
    import torch

    from kernelrag.verify.tolerances import compare, slack_of, tolerance_for

    ref = torch.linspace(1.0, 2.0, 1_000_000, dtype=torch.float64)
    native = ref.clone()
    native[7] += 1e-3                       # PyTorch's own fp32 result is off here (ill-conditioned element)
    out = ref.clone().float()
    out[7] += 3e-3                          # the kernel is off by 3x PyTorch's own error there
    tol = tolerance_for(torch.float32)
    assert not compare(out, ref, tol).passed                       # the table alone rejects it
    assert compare(out, ref, tol, slack_of(native, ref)).passed    # calibrated: within 4x PyTorch's error
    far = out.clone()
    far[7] += 1e-2                          # 13x PyTorch's error: still rejected
    assert not compare(far, ref, tol, slack_of(native, ref)).passed
    elsewhere = ref.clone().float()
    elsewhere[8] += 3e-3                    # off where PyTorch is exact: no widening
    assert not compare(elsewhere, ref, tol, slack_of(native, ref)).passed
    assert not compare(torch.zeros_like(out), ref, tol, slack_of(native, ref)).passed


def test_an_element_where_pytorchs_rounding_cancelled_asks_only_pytorchs_typical_accuracy():
    """A clamp after a GEMM keeps the near-zero sums: there PyTorch's error (its summation
    order) is as large as anywhere, in absolute terms, but by luck sometimes ~0. A kernel
    summing in another order, exactly as accurate on the whole, must not fail there."""
    import torch

    from kernelrag.verify.tolerances import compare, slack_of, tolerance_for

    g = torch.Generator().manual_seed(1)
    n, sigma = 200_000, 3e-4                       # outputs ~1 after the clamp; rounding error ~3e-4
    ref = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
    native = ref + sigma * torch.randn(n, generator=g, dtype=torch.float64)
    native[::50] = ref[::50]                       # where PyTorch's sum happened to cancel exactly
    kernel = ref + sigma * torch.randn(n, generator=g, dtype=torch.float64)   # independent, as accurate
    tol = tolerance_for(torch.float32, {"atol": 1e-4, "rtol": 1e-4, "rel_norm": 1e-3})
    slack = slack_of(native, ref)
    per_element_only = (kernel - ref).abs() > 1e-4 + 1e-4 * ref.abs() + 4.0 * slack.double()
    assert bool(per_element_only[::50].any())      # the old bound failed it at the lucky elements
    assert compare(kernel.float(), ref, tol, slack).passed
    assert not compare((ref + 5 * sigma * torch.randn(n, generator=g, dtype=torch.float64)).float(),
                       ref, tol, slack).passed     # 5x less accurate than PyTorch on the whole: rejected
    for fake in (torch.zeros(n), ref.flip(0).float(), (ref * 1.01).float()):
        assert not compare(fake, ref, tol, slack).passed


def test_a_clamp_that_saturates_almost_every_output_keeps_pytorchs_typical_accuracy_as_floor():
    """Large inputs to a GEMM and a clamp: 99.9% of the outputs sit exactly on a bound, where
    PyTorch's error is 0, and the few kept ones carry the GEMM's rounding. The floor comes
    from the rounded elements, so an equally accurate kernel passes there, while a far less
    accurate one and a wrong value at a saturated element still fail."""
    g = torch.Generator().manual_seed(2)
    n, kept, sigma = 1_000_000, 700, 3e-4
    ref = torch.full((n,), 0.5, dtype=torch.float64)
    ref[::2] = -0.5
    idx = torch.randperm(n, generator=g)[:kept]
    ref[idx] = torch.rand(kept, generator=g, dtype=torch.float64) - 0.5
    native, kernel = ref.clone(), ref.clone()
    native[idx] += sigma * torch.randn(kept, generator=g, dtype=torch.float64)
    native[idx[::10]] = ref[idx[::10]]                       # where cuBLAS's rounding cancelled
    kernel[idx] += sigma * torch.randn(kept, generator=g, dtype=torch.float64)
    tol, slack = FP32, slack_of(native, ref)
    assert compare(kernel.float(), ref, tol, slack).passed
    wrong = kernel.clone()
    wrong[1] = 0.45                                          # a saturated element off by 0.05
    assert not compare(wrong.float(), ref, tol, slack).passed
    sloppy = ref.clone()
    sloppy[idx] += 20 * sigma * torch.randn(kept, generator=g, dtype=torch.float64)
    assert not compare(sloppy.float(), ref, tol, slack).passed    # 20x PyTorch's error where it rounds


def test_the_relative_norm_bound_widens_with_pytorchs_own_whole_output_error_only():
    """A near-one-hot softmax: fp32 rounding of near-ties puts PyTorch's own output ~1e-4
    off the fp64 reference as a whole (bench/tasks/bmm_scale_softmax.py's large trial)."""
    import torch

    from kernelrag.verify.tolerances import compare, slack_of, tolerance_for

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(200_000, generator=g, dtype=torch.float64)
    tol = tolerance_for(torch.float32)
    noise = torch.randn(200_000, generator=g, dtype=torch.float64)
    native = ref + 2e-4 * ref.norm() / noise.norm() * noise * (torch.rand(200_000, generator=g) < 0.01)
    own = float((native - ref).norm() / ref.norm())
    assert own > tol.rel_norm                                       # PyTorch itself fails the table's bound
    slack = slack_of(native, ref)
    kernel = (ref + 1.5 * (native - ref)).float()                  # 1.5x PyTorch's own error, same places
    assert not compare(kernel, ref, tol).passed
    assert compare(kernel, ref, tol, slack).passed
    for fake in (torch.zeros_like(kernel), torch.full_like(kernel, float(ref.mean())), ref.flip(0).float()):
        assert not compare(fake, ref, tol, slack).passed            # null controls stay far outside
    accurate = slack_of(ref.float(), ref)                           # where PyTorch is accurate: the table rules
    assert not compare(ref.to(torch.bfloat16).float(), ref, tol, accurate).passed
