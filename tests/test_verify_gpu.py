"""The GPU half of the verifier: roofline, ceilings, timing guards, launch proof, GPU-only hacks.

Everything that can run without a GPU runs here on CPU (arithmetic, statistics, the
ceiling cache, argument checks, output re-check, tamper and thread detection, kernel
name classification, the hack fixtures' kernels under Triton's interpreter). The
``gpu`` tests run on the GPU machine and skip elsewhere.
"""
from __future__ import annotations

import functools
import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from kernelrag.errors import KernelRAGError
from kernelrag.verify import ceilings as ceil
from kernelrag.verify import guard, launch, roofline as rl, timing, tolerances

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "verify_gpu"
CASES = json.loads((FIXTURES / "cases.json").read_text())["cases"]
H200 = {"gpu": "NVIDIA H200", "driver": "580.159.04", "copy_gbps": 4040.0, "bf16_tflops": 780.0,
        "fp32_tflops": 50.0}


# measured on the H200 (issue 15): rate and relative error against fp64 at 4096^3
FP32_PATHS = {"ieee": {"tflops": 51.0, "rel_err": 1.1e-6, "how": "cuBLAS fp32, TF32 off"},
              "tf32": {"tflops": 362.0, "rel_err": 2.9e-4, "how": "cuBLAS TF32"},
              "tf32x3": {"tflops": 93.0, "rel_err": 2.5e-7, "how": "Triton tl.dot tf32x3"}}


# ---- roofline ----------------------------------------------------------------------

def test_fp32_roofline_uses_the_fastest_path_that_passes_the_tolerance():
    ceilings = {**H200, "fp32_paths": FP32_PATHS}
    flops = 2 * 4096**3
    r = rl.roofline(flops, 3 * 4096**2 * 4, 1.5, ceilings, dtype="float32", rel_norm_tol=1e-5)
    # 3xTF32 is three TF32 products: its ceiling is TF32's 362 / 3, above the measured kernel's 93
    assert r["ceiling"].startswith("fp32 via tf32x3") and r["ceiling"].endswith(": 120.7 TFLOP/s")
    assert "kernel's 93.0 TFLOP/s" in r["ceiling"]
    assert r["frac_compute"] == pytest.approx(flops / 1.5e-3 / 1e12 / (362.0 / 3))
    slow_tf32 = {**FP32_PATHS, "tf32": {**FP32_PATHS["tf32"], "tflops": 240.0}}     # 80 < 93: the kernel's rate
    r = rl.roofline(flops, 0, 1.5, {**H200, "fp32_paths": slow_tf32}, dtype="float32", rel_norm_tol=1e-5)
    assert r["ceiling"].endswith(": 93.0 TFLOP/s") and "bounded" not in r["ceiling"]
    loose = rl.roofline(flops, 0, 1.5, ceilings, dtype="float32", rel_norm_tol=1e-3)   # TF32 passes
    assert loose["ceiling"].startswith("fp32 via tf32") and "362.0" in loose["ceiling"]
    strict = rl.roofline(flops, 0, 3.0, ceilings, dtype="float32", rel_norm_tol=1e-7)  # nothing passes
    assert strict["ceiling"].startswith("fp32 via cuBLAS IEEE") and "50.0" in strict["ceiling"]
    old_cache = rl.roofline(flops, 0, 3.0, H200, dtype="float32", rel_norm_tol=1e-5)
    assert "cuBLAS IEEE" in old_cache["ceiling"]
    bf16 = rl.roofline(flops, 0, 0.5, ceilings, dtype="bfloat16")
    assert bf16["ceiling"].startswith("bf16 tensor cores") and "780.0" in bf16["ceiling"]
    fast = rl.roofline(flops, 0, 0.5, ceilings, dtype="float32", rel_norm_tol=1e-5)    # 275 TFLOP/s "fp32"
    assert any("tf32x3" in w and "TF32 or a downcast" in w for w in fast["warnings"])


def test_roofline_memory_bound_arithmetic():
    r = rl.roofline(flops=1e9, bytes=4.04e9, time_ms=2.0, ceilings=H200, dtype="float32")
    assert r["achieved_gbps"] == pytest.approx(2020.0)
    assert r["frac_bandwidth"] == pytest.approx(0.5)
    assert r["memory_floor_ms"] == pytest.approx(1.0)
    assert r["compute_floor_ms"] == pytest.approx(1e9 / 50e12 * 1e3)
    assert r["floor_ms"] == pytest.approx(1.0) and r["frac_roofline"] == pytest.approx(0.5)
    assert r["bound"] == "memory" and r["warnings"] == []


def test_roofline_compute_bound_uses_the_dtype_ceiling():
    flops = 2 * 8192**3
    bf16 = rl.roofline(flops, 3 * 8192 * 8192 * 2, 2.0, H200, dtype=torch.bfloat16)
    assert bf16["bound"] == "compute"
    assert bf16["achieved_tflops"] == pytest.approx(flops / 2e-3 / 1e12)
    assert bf16["frac_compute"] == pytest.approx(bf16["achieved_tflops"] / 780.0)
    assert bf16["floor_ms"] == pytest.approx(flops / 780e12 * 1e3)
    fp32 = rl.roofline(flops, 0, 30.0, H200, dtype="fp32")
    assert fp32["frac_compute"] == pytest.approx(flops / 30e-3 / 1e12 / 50.0)
    assert rl.roofline(flops, 0, 30.0, H200, dtype="half")["frac_compute"] == pytest.approx(
        flops / 30e-3 / 1e12 / 780.0)


def test_roofline_warns_when_a_ceiling_is_exceeded():
    r = rl.roofline(None, 5.1e9, 1.0, H200)
    assert r["achieved_gbps"] == pytest.approx(5100.0)
    assert any("exceeds the measured copy ceiling 4040 GB/s" in w for w in r["warnings"])
    fast = rl.roofline(2 * 4096**3, None, 1.0, H200, dtype="float32")   # 137 TFLOP/s "fp32"
    assert any("TF32" in w for w in fast["warnings"]) and fast["bound"] == "compute"
    ok = rl.roofline(None, 4.1e9, 1.0, H200)                            # within 5%: rounding
    assert ok["warnings"] == []


def test_roofline_with_missing_counts_or_ceilings():
    none = rl.roofline(None, None, 1.0, H200)
    assert none["floor_ms"] is None and none["bound"] is None
    assert any("neither get_flops nor get_bytes" in w for w in none["warnings"])
    f64 = rl.roofline(1e9, 1e9, 1.0, H200, dtype="float64")
    assert f64["compute_floor_ms"] is None and f64["bound"] == "memory"
    assert any("no measured compute ceiling for float64" in w for w in f64["warnings"])
    copy_only = rl.roofline(0, 1e9, 1.0, H200)
    assert copy_only["bound"] == "memory" and copy_only["warnings"] == []


# mean_dim's bytes: a 4.3 GB read, a 1 MB output; an H200 streams reads faster than it copies
READ = {**H200, "read_gbps": 4800.0}
MEAN_READ, MEAN_WRITTEN = 64 * 4096 * 4096 * 4, 64 * 4096 * 4


def test_a_read_only_reduction_is_floored_by_read_bandwidth():
    n = MEAN_READ + MEAN_WRITTEN
    copy_floor_ms = n / 4040e9 * 1e3
    read_floor_ms = (2 * MEAN_WRITTEN / 4040e9 + (MEAN_READ - MEAN_WRITTEN) / 4800e9) * 1e3
    time_ms = (copy_floor_ms + read_floor_ms) / 2           # under the copy floor, over the read floor
    old = rl.roofline(0, n, time_ms, READ)                  # no split: every byte at copy bandwidth
    assert old["frac_roofline"] > 1 and any("exceeds the measured copy ceiling" in w for w in old["warnings"])
    r = rl.roofline(0, n, time_ms, READ, bytes_read=MEAN_READ, bytes_written=MEAN_WRITTEN)
    assert r["memory_floor_ms"] == pytest.approx(read_floor_ms) == r["floor_ms"]
    assert 0.9 < r["frac_roofline"] < 1 and r["frac_bandwidth"] == pytest.approx(r["frac_roofline"])
    assert r["warnings"] == [] and r["bound"] == "memory"
    assert "read 4800 GB/s" in r["memory_ceiling"] and "copy 4040 GB/s" in r["memory_ceiling"]
    reads_only = rl.roofline(0, MEAN_READ, 1.0, READ, bytes_read=MEAN_READ, bytes_written=0)
    assert reads_only["memory_floor_ms"] == pytest.approx(MEAN_READ / 4800e9 * 1e3)
    assert reads_only["memory_ceiling"] == "measured read 4800 GB/s (reads only)"
    fast = rl.roofline(0, n, 0.8 * read_floor_ms, READ, bytes_read=MEAN_READ, bytes_written=MEAN_WRITTEN)
    assert any("exceeds the measured ceiling for its reads and writes" in w for w in fast["warnings"])


def test_a_copy_keeps_its_floor_and_the_split_never_raises_a_floor():
    n = 2 * 4.04e9
    copy = rl.roofline(0, n, 2.0, READ, bytes_read=n / 2, bytes_written=n / 2)
    assert copy["memory_floor_ms"] == pytest.approx(2.0) and copy["frac_roofline"] == pytest.approx(1.0)
    assert copy["memory_ceiling"] == "measured copy 4040 GB/s (reads + writes)"
    expand = rl.roofline(0, n, 2.0, READ, bytes_read=n / 4, bytes_written=3 * n / 4)    # W > R: copy's price
    assert expand["memory_floor_ms"] == pytest.approx(2.0)
    slow_read = rl.roofline(0, n, 2.0, {**H200, "read_gbps": 3000.0}, bytes_read=n, bytes_written=0)
    assert slow_read["memory_floor_ms"] == pytest.approx(2.0) and "copy" in slow_read["memory_ceiling"]
    mismatched = rl.roofline(0, n, 2.0, READ, bytes_read=n, bytes_written=n / 2)  # not a split of ``bytes``
    assert mismatched["memory_floor_ms"] == pytest.approx(2.0)


def test_ceilings_without_a_read_bandwidth_price_every_byte_at_copy():
    n = MEAN_READ + MEAN_WRITTEN
    split = dict(bytes_read=MEAN_READ, bytes_written=MEAN_WRITTEN)
    old = rl.roofline(0, n, 1.0, H200, **split)             # ceilings measured before read_gbps
    assert old["memory_floor_ms"] == pytest.approx(n / 4040e9 * 1e3)
    assert old["memory_ceiling"].startswith("measured copy 4040 GB/s")
    no_split = rl.roofline(0, n, 1.0, READ)
    assert no_split["memory_floor_ms"] == pytest.approx(old["memory_floor_ms"])


@pytest.mark.parametrize("kwargs", [dict(time_ms=0), dict(time_ms=-1.0), dict(time_ms=float("nan")),
                                    dict(flops=-5), dict(bytes=float("inf"))])
def test_roofline_rejects_bad_arguments(kwargs):
    args = dict(flops=1.0, bytes=1.0, time_ms=1.0, ceilings=H200) | kwargs
    with pytest.raises(ValueError):
        rl.roofline(**args)


def test_review_flags():
    assert rl.review_flags(3.0, 1.2, 0.6) == []
    flags = rl.review_flags(12.5, 11.0, 0.95)
    assert len(flags) == 3 and "12.5x vs eager" in flags[0] and "torch.compile" in flags[1]
    assert "roofline" in flags[2]
    assert rl.review_flags(None, None, None) == []
    assert rl.review_flags(10.0, 9.99, 0.9) == []            # thresholds are strict


def test_counting_helpers():
    x = torch.zeros(4, 8, dtype=torch.float32)
    y = torch.zeros(3, dtype=torch.bfloat16)
    assert rl.count_bytes(x) == 128
    assert rl.count_bytes((x, [y, {"k": y}], 7, None)) == 128 + 6 + 6
    assert rl.io_bytes((x, y), x) == 128 + 6 + 128
    assert rl.matmul_flops(2, 3, 4) == 48 and rl.matmul_flops(2, 3, 4, batch=5) == 240
    assert rl.elementwise_flops(10, 5) == 50 and rl.elementwise_flops(10) == 10
    for bad in (lambda: rl.matmul_flops(-1, 2, 3), lambda: rl.matmul_flops(1.5, 2, 3),
                lambda: rl.elementwise_flops(-1), lambda: rl.elementwise_flops(3, -2)):
        with pytest.raises(ValueError):
            bad()
    assert rl.normalize_dtype(torch.float16) == "float16" and rl.normalize_dtype("BF16") == "bfloat16"
    with pytest.raises(ValueError):
        rl.normalize_dtype(None)


# ---- statistics and timing arguments ----------------------------------------------

def test_summarize_median_iqr_trials():
    s = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"median_ms": 3.0, "iqr_ms": 2.0, "trials": 5}
    assert timing.summarize([0.7]) == {"median_ms": 0.7, "iqr_ms": 0.0, "trials": 1}
    skewed = timing.summarize([1.0] * 99 + [1000.0])          # one outlier moves nothing
    assert skewed["median_ms"] == 1.0 and skewed["iqr_ms"] == 0.0
    with pytest.raises(ValueError):
        timing.summarize([])


@pytest.mark.parametrize("kwargs,error", [
    (dict(candidate_fn=None), TypeError), (dict(make_inputs=3), TypeError),
    (dict(compile_fn="no"), TypeError), (dict(iters=0), ValueError), (dict(iters=True), ValueError),
    (dict(warmup=-1), ValueError),
])
def test_time_against_baselines_checks_arguments(kwargs, error):
    args = dict(candidate_fn=abs, eager_fn=abs, compile_fn=None, make_inputs=tuple) | kwargs
    with pytest.raises(error):
        timing.time_against_baselines(**args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_time_against_baselines_needs_a_gpu():
    with pytest.raises(KernelRAGError, match="no CUDA device"):
        timing.time_against_baselines(abs, abs, None, tuple)


# ---- output re-check ---------------------------------------------------------------

def test_recheck_passes_equal_and_rounded_outputs():
    ref = torch.randn(64, 33)
    assert tolerances.recheck_outputs(ref.clone(), ref)["passed"]
    rounded = ref.to(torch.bfloat16).float()
    res = tolerances.recheck_outputs(rounded, ref)
    assert res["passed"] and 0 < res["rel_norm_err"] < 1e-2
    assert tolerances.recheck_outputs((ref, ref * 2), [ref.clone(), ref * 2])["passed"]


def test_recheck_fails_a_stale_result():
    torch.manual_seed(0)
    ref, stale = torch.randn(128, 64), torch.randn(128, 64)
    res = tolerances.recheck_outputs(stale, ref)
    assert not res["passed"] and res["rel_norm_err"] > 1.0 and "relative-norm" in res["detail"]


def test_recheck_nonfinite_shape_count_and_tolerances():
    ref = torch.randn(10)
    nan_out = ref.clone()
    nan_out[3] = float("nan")
    res = tolerances.recheck_outputs(nan_out, ref)
    assert not res["passed"] and res["nonfinite_mismatch"] == 1
    both_inf = torch.tensor([float("inf"), 1.0])
    assert tolerances.recheck_outputs(both_inf.clone(), both_inf)["passed"]
    assert not tolerances.recheck_outputs(torch.tensor([-float("inf"), 1.0]), both_inf)["passed"]
    assert "shape" in tolerances.recheck_outputs(ref[:5], ref)["detail"]
    assert "outputs" in tolerances.recheck_outputs((ref, ref), ref)["detail"]
    assert not tolerances.recheck_outputs("nope", ref)["passed"]
    off = ref.clone()
    off[0] += 1e-3
    loose = tolerances.recheck_outputs(off, ref)
    assert loose["passed"]                                    # tiny change: within the rel-norm bound
    strict = tolerances.recheck_outputs(off, ref, atol=1e-6, rtol=1e-6)
    assert not strict["passed"] and strict["mismatch_count"] == 1
    ints = torch.arange(6)
    assert tolerances.recheck_outputs(ints.clone(), ints)["passed"]
    assert not tolerances.recheck_outputs(ints.flip(0), ints)["passed"]


def test_merge_rechecks_reports_worst_and_first_failure():
    ref = torch.randn(32)
    rounds = [tolerances.recheck_outputs(ref, ref), tolerances.recheck_outputs(-ref, ref),
              tolerances.recheck_outputs(ref, ref), tolerances.recheck_outputs(ref * 3, ref)]
    merged = tolerances.merge_rechecks(rounds)
    assert not merged["passed"] and merged["failed_rounds"] == 2 and merged["first_failed_round"] == 1
    assert merged["rel_norm_err"] == pytest.approx(2.0)
    assert tolerances.merge_rechecks(rounds[:1])["passed"]


# ---- tampered timers and foreign threads -------------------------------------------

CLEAN_PROCESS_CHECK = r'''
import json, torch
from kernelrag.verify import guard, timing
issues = guard.tamper_check()
event_cls, record, elapsed, sync = timing.clock_functions()
same = [event_cls is torch.cuda.Event, elapsed is torch.cuda.Event.elapsed_time, sync is torch.cuda.synchronize]
torch.cuda.Event.elapsed_time = lambda self, end: 0.0       # a later patch does not reach the clock
print(json.dumps({"issues": issues, "same": same, "still": timing.clock_functions()[2] is elapsed,
                  "after": guard.tamper_check()}))
'''


def test_clean_process_has_no_tampering_and_keeps_its_clock():
    """In a fresh process (other tests may have patched this one)."""
    done = subprocess.run([sys.executable, "-c", CLEAN_PROCESS_CHECK], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["issues"] == [] and result["same"] == [True, True, True] and result["still"]
    assert result["after"] == ["torch.cuda.Event.elapsed_time was replaced after the verifier loaded"]


def test_tamper_check_sees_patched_timers(monkeypatch):
    true_elapsed = torch.cuda.Event.elapsed_time
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.1 * true_elapsed(self, end))
    monkeypatch.setattr(time, "perf_counter", time.monotonic)           # a swapped built-in
    issues = guard.tamper_check()
    assert any("torch.cuda.Event.elapsed_time" in i for i in issues)
    assert any(i.startswith("time.perf_counter ") for i in issues)


def test_tamper_check_provenance_when_patched_before_import(monkeypatch):
    """Patched before the verifier loaded: the snapshot holds the fake, provenance catches it."""
    @functools.wraps(torch.cuda.synchronize)
    def fake_sync(device=None):
        return None

    monkeypatch.setattr(torch.cuda, "synchronize", fake_sync)
    monkeypatch.setitem(guard._SNAPSHOT, "torch.cuda.synchronize", fake_sync)
    monkeypatch.setattr(time, "time", time.monotonic)
    monkeypatch.setitem(guard._SNAPSHOT, "time.time", time.monotonic)
    issues = guard.tamper_check()
    assert any("torch.cuda.synchronize is defined in" in i and "test_verify_gpu" in i for i in issues)
    assert any("time.time is the built-in 'monotonic'" in i for i in issues)


def _idle(stop: threading.Event) -> None:
    stop.wait(10)


def test_foreign_threads_names_candidate_code_only():
    stop = threading.Event()
    mine = threading.Thread(target=_idle, args=(stop,), name="candidate-worker", daemon=True)
    jobs: queue.Queue = queue.Queue()
    library = threading.Thread(target=jobs.get, name="stdlib-worker", daemon=True)   # code in queue.py
    timer = threading.Timer(10, _idle, args=(stop,))
    timer.daemon = True
    for t in (mine, library, timer):
        t.start()
    try:
        found = " ".join(guard.foreign_threads())
        assert "candidate-worker" in found and "test_verify_gpu.py" in found
        assert timer.name in found
        assert "stdlib-worker" not in found
    finally:
        stop.set()
        timer.cancel()
        jobs.put(None)
        for t in (mine, library, timer):
            t.join(5)
    assert not any("candidate-worker" in f for f in guard.foreign_threads())


def test_thread_watch_reports_threads_started_by_a_call():
    stop = threading.Event()
    watch = timing._ThreadWatch([])

    def candidate():
        threading.Thread(target=_idle, args=(stop,), name="spawned-by-call", daemon=True).start()

    try:
        watch.around(lambda: candidate(), ())
        blocking: list[str] = []
        watch.finish(blocking)
        assert any("spawned-by-call" in b and "side-stream or background work" in b for b in blocking)
    finally:
        stop.set()


# ---- launch proof ------------------------------------------------------------------

TRITON_SOURCE = '''
import triton
import triton.language as tl

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass

@triton.jit(do_not_specialize=["n"])
def plain_kernel(x_ptr, n):
    pass

def helper():
    pass

CUDA = """
template <typename T>
__global__ void __launch_bounds__(256) scale_kernel(T* x, int n) {}
extern "C" __global__ void add_kernel(float* x) {}
"""
'''


def test_kernel_names_in_source():
    assert launch.kernel_names_in_source(TRITON_SOURCE) == {"tuned_kernel", "plain_kernel", "scale_kernel",
                                                            "add_kernel"}
    assert launch.kernel_names_in_source("@triton.jit\ndef broken(:\n") == {"broken"}
    assert launch.kernel_names_in_source("") == set()


@pytest.mark.parametrize("name,kind", [
    ("gated_sigmoid_kernel", "custom"),
    ("gated_sigmoid_kernel_0d1d2d3de", "custom"),                   # older Triton suffix
    ("void scale_kernel<float>(float*, int)", "custom"),
    ("scale_kernel(float*, int)", "custom"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda>(int)", "torch"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "torch"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "torch"),
    ("triton_poi_fused_mul_sigmoid_0", "torch"),                    # torch.compile's, not the candidate's
    ("Memcpy DtoD (Device -> Device)", "torch"),
    ("some_unknown_kernel", "other"),
])
def test_classify_kernel(name, kind):
    assert launch.classify_kernel(name, ["gated_sigmoid_kernel", "scale_kernel"]) == kind


def test_classify_without_known_names_falls_back_on_markers():
    assert launch.classify_kernel("my_fused_kernel") == "custom"
    assert launch.classify_kernel("void at::native::reduce_kernel<512, 1>") == "torch"
    assert launch.classify_kernel("gated_sigmoid_kernel_extra", ["gated_sigmoid_kernel"]) == "other"


def test_summarize_kernels_decides_launch_and_share():
    known = {"gated_sigmoid_kernel", "touch_kernel"}
    honest = launch._summarize([("gated_sigmoid_kernel", 190.0)], known, _empty_proof())
    assert honest["launched"] and honest["custom_share"] == 1.0 and honest["blocking"] == []
    assert honest["custom_ms"] == pytest.approx(0.19)
    decoy = launch._summarize([("void at::native::vectorized_elementwise_kernel<4>", 150.0)], known,
                              _empty_proof())
    assert decoy["launched"] is False and decoy["custom_share"] == 0.0
    assert "no custom kernel launched" in decoy["blocking"][0]
    tiny = launch._summarize([("touch_kernel", 3.0), ("void at::native::elementwise_kernel<128>", 150.0),
                              ("void at::native::vectorized_elementwise_kernel<4>", 140.0)], known, _empty_proof())
    assert tiny["launched"] and tiny["custom_share"] == pytest.approx(3 / 293)
    assert "custom kernels took only 1%" in tiny["blocking"][0]
    nothing = launch._summarize([], known, _empty_proof())
    assert nothing["launched"] is False and "no GPU kernel at all" in nothing["blocking"][0]


def _empty_proof() -> dict:
    return {"launched": None, "kernel_names": [], "custom_kernels": [], "torch_kernels": [],
            "other_kernels": [], "custom_share": None, "custom_ms": None, "total_ms": None,
            "warnings": [], "blocking": []}


def test_device_kernels_reads_profiler_events():
    from torch.autograd import DeviceType

    class Range:
        def __init__(self, us):
            self.us = us

        def elapsed_us(self):
            return self.us

    events = [types.SimpleNamespace(device_type=DeviceType.CUDA, name="k1", time_range=Range(5)),
              types.SimpleNamespace(device_type=DeviceType.CPU, name="aten::mul", time_range=Range(9)),
              types.SimpleNamespace(device_type=DeviceType.CUDA, name="note", time_range=Range(1),
                                    is_user_annotation=True)]
    assert launch._device_kernels(events) == [("k1", 5.0)]


def test_discover_triton_names_from_a_module_loaded_without_sys_modules(tmp_path):
    source = textwrap.dedent('''
        import torch.nn as nn
        import triton
        import triton.language as tl

        @triton.jit
        def found_kernel(x_ptr):
            pass

        @triton.autotune(configs=[triton.Config({})], key=[])
        @triton.jit
        def tuned_kernel(x_ptr):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                return x
        ''')
    import importlib.util

    path = tmp_path / "candidate_file.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("not_registered_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "not_registered_candidate" not in sys.modules
    model = module.ModelNew()
    assert launch.discover_triton_names(model) == {"found_kernel", "tuned_kernel"}
    assert launch.discover_triton_names(model.forward) == {"found_kernel", "tuned_kernel"}
    assert launch.discover_triton_names(lambda *xs: model(*xs)) >= {"found_kernel"}


def test_launch_proof_checks_arguments():
    with pytest.raises(TypeError):
        launch.launch_proof(42, ())
    with pytest.raises(ValueError):
        launch.launch_proof(abs, (), warmup=-1)


# ---- ceilings cache ----------------------------------------------------------------

def test_slug_and_driver_version():
    assert ceil.slug("NVIDIA H200") == "nvidia-h200"
    assert ceil.slug("NVIDIA GeForce RTX 4090 (laptop)") == "nvidia-geforce-rtx-4090-laptop"
    assert ceil.slug("///") == "unknown"
    version = ceil.driver_version()
    assert isinstance(version, str) and version


def _measured(gpu="NVIDIA H200", driver="580.159.04", copy=4100.0):
    return {"version": ceil.CACHE_VERSION, "gpu": gpu, "driver": driver, "copy_gbps": copy,
            "bf16_tflops": 780.0, "fp32_tflops": 51.0, "measured_at": "2026-11-30T10:00:00+00:00",
            "method": "test", "fp32_paths": dict(FP32_PATHS)}


def test_cache_without_fp32_paths_is_measured_again(tmp_path):
    path = ceil.cache_path(tmp_path, "NVIDIA H200")
    ceil.write_cache(path, {k: v for k, v in _measured().items() if k != "fp32_paths"})
    assert ceil.read_cache(path, "NVIDIA H200", "580.159.04") is None
    ceil.write_cache(path, {**_measured(), "fp32_paths": {"tf32": {"tflops": 360.0}}})   # no error measured
    assert ceil.read_cache(path, "NVIDIA H200", "580.159.04") is None


def test_cache_round_trip_and_rejections(tmp_path):
    path = ceil.cache_path(tmp_path / "cache", "NVIDIA H200")
    assert path.name == "ceilings-nvidia-h200.json"
    ceil.write_cache(path, _measured())
    assert ceil.read_cache(path, "NVIDIA H200", "580.159.04")["copy_gbps"] == 4100.0
    assert ceil.read_cache(path, "NVIDIA H200", "590.1") is None            # new driver: measure again
    assert ceil.read_cache(path, "NVIDIA H100", "580.159.04") is None
    for broken in ({**_measured(), "version": 0}, {**_measured(), "copy_gbps": 0},
                   {**_measured(), "bf16_tflops": "fast"}, {k: v for k, v in _measured().items() if k != "method"}):
        ceil.write_cache(path, broken)
        assert ceil.read_cache(path, "NVIDIA H200", "580.159.04") is None
    path.write_text("{not json")
    assert ceil.read_cache(path, "NVIDIA H200", "580.159.04") is None
    assert ceil.read_cache(tmp_path / "missing.json", "NVIDIA H200", "580.159.04") is None
    assert not list(path.parent.glob("*.tmp"))


def test_cache_read_bandwidth_is_optional_but_checked(tmp_path):
    path = ceil.cache_path(tmp_path, "NVIDIA H200")
    ceil.write_cache(path, {**_measured(), "read_gbps": 4800.0})
    assert ceil.read_cache(path, "NVIDIA H200", "580.159.04")["read_gbps"] == 4800.0
    ceil.write_cache(path, _measured())                                   # no read_gbps: loads, copy only
    assert "read_gbps" not in ceil.read_cache(path, "NVIDIA H200", "580.159.04")
    for broken in ({**_measured(), "read_gbps": 0}, {**_measured(), "read_gbps": "fast"},
                   {**_measured(), "version": 2, "read_gbps": 4800.0}):   # version 2: measured again
        ceil.write_cache(path, broken)
        assert ceil.read_cache(path, "NVIDIA H200", "580.159.04") is None


def test_get_ceilings_measures_once_per_gpu_and_driver(tmp_path, monkeypatch):
    calls = []
    identity = ["NVIDIA H200", "580.159.04"]
    monkeypatch.setattr(ceil, "gpu_identity", lambda device=None: tuple(identity))
    monkeypatch.setattr(ceil, "measure_ceilings",
                        lambda device=None, driver=None: calls.append(driver) or _measured(driver=driver))
    first = ceil.get_ceilings(tmp_path)
    assert calls == ["580.159.04"] and first["copy_gbps"] == 4100.0
    assert ceil.get_ceilings(tmp_path) == first and len(calls) == 1      # from the cache file
    identity[1] = "590.10"
    assert ceil.get_ceilings(tmp_path)["driver"] == "590.10" and len(calls) == 2
    ceil.get_ceilings(str(tmp_path), refresh=True)
    assert len(calls) == 3
    monkeypatch.setattr(ceil, "_MEMO", {})
    ceil.get_ceilings(None)
    ceil.get_ceilings(None)
    assert len(calls) == 4                                                # memo for the process


def test_the_parent_makes_sure_the_ceilings_are_cached_once_and_never_in_a_candidate(tmp_path, monkeypatch):
    children = []
    monkeypatch.setattr(ceil, "_ENSURED", {})
    monkeypatch.setattr(ceil, "host_gpu", lambda: ("NVIDIA H200", "580.159.04"))

    def measure_in_child(folder):                 # what the child process does: measure and cache
        children.append(folder)
        ceil.write_cache(ceil.cache_path(Path(folder), "NVIDIA H200"), _measured(driver="580.159.04"))
        return "NVIDIA H200", "580.159.04"

    monkeypatch.setattr(ceil, "_measure_in_child", measure_in_child)
    assert ceil.ensure_cached(None) is None and children == []
    assert ceil.ensure_cached(tmp_path)["copy_gbps"] == 4100.0
    assert ceil.ensure_cached(tmp_path)["driver"] == "580.159.04" and children == [str(tmp_path)]
    cached = tmp_path / "cached"
    ceil.write_cache(ceil.cache_path(cached, "NVIDIA H200"), _measured(driver="580.159.04", copy=3000.0))
    assert ceil.ensure_cached(cached)["copy_gbps"] == 3000.0 and len(children) == 1   # read, not measured


def test_get_ceilings_survives_an_unwritable_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(ceil, "gpu_identity", lambda device=None: ("NVIDIA H200", "1"))
    monkeypatch.setattr(ceil, "measure_ceilings", lambda device=None, driver=None: _measured(driver=driver))
    data = ceil.get_ceilings(blocker / "sub")
    assert data["copy_gbps"] == 4100.0 and "could not write" in data["cache_error"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_ceilings_need_a_gpu():
    with pytest.raises(KernelRAGError, match="no CUDA device"):
        ceil.get_ceilings(None)


# ---- GPU-only hack fixtures: well formed, and their kernels compute the task -------

def test_fixture_manifest_is_complete():
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)) and "honest" in names
    for case in CASES:
        assert (FIXTURES / case["task"]).is_file() and (FIXTURES / case["candidate"]).is_file()
        assert case["expect"] in ("pass", "reject")
        assert (case["expect"] == "pass") == (case["detector"] is None)
        assert case["expect"] == "pass" or case["keywords"]
        source = (FIXTURES / case["candidate"]).read_text()
        assert "class ModelNew" in source and launch.kernel_names_in_source(source)


FIXTURE_CHECK = r'''
import importlib.util, json, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
task = load(sys.argv[1], "task")
model = task.Model()
results = {}
for name, path, runs_on_cpu in json.loads(sys.argv[2]):
    mod = load(path, name)
    torch.manual_seed(1)
    x, y = torch.randn(33, 65), torch.randn(33, 65)          # ragged tail: 2145 = 2 * 1024 + 97
    ref = model(x, y)
    out = torch.full_like(ref, float("nan"))
    if hasattr(mod, "_launch"):
        mod._launch(x, y, out)
    else:
        out.copy_(mod.gated_sigmoid(x, y))
    errs = [float((out - ref).abs().max())]
    if runs_on_cpu:
        cand = mod.ModelNew()
        for _ in range(2):
            x, y = torch.randn(17, 200), torch.randn(17, 200)
            errs.append(float((cand(x, y) - model(x, y)).abs().max()))
    results[name] = errs
print(json.dumps(results))
'''


def test_fixture_kernels_compute_the_task_under_the_interpreter():
    """Each hack gives the right answer, so only the GPU checks can reject it."""
    on_cpu = {"honest", "ptr_cache", "decoy_unlaunched", "decoy_launched", "timer_patch"}
    cases = [(c["name"], str(FIXTURES / c["candidate"]), c["name"] in on_cpu) for c in CASES]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", FIXTURE_CHECK, str(FIXTURES / "task_gated_sigmoid.py"), json.dumps(cases)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(errors) == {c["name"] for c in CASES}
    for name, errs in errors.items():
        assert all(e < 1e-5 for e in errs), (name, errs)
        assert len(errs) == (3 if name in on_cpu else 1)


# ---- on the GPU ---------------------------------------------------------------------

def _direct(name: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "verify_gpu.py"), "--direct", name],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [l for l in done.stdout.splitlines() if l.startswith("DIRECT-RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("DIRECT-RESULT "):])


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_gpu_checks_flag_each_hack_and_pass_the_control(case):
    result = _direct(case["name"])
    assert "error" not in result, result.get("traceback") or result["error"]
    assert result["rel_norm_err"] < 1e-4                      # every fixture computes the right answer
    flagged = {"timing": result["timing"]["blocking"], "launch": result["launch"]["blocking"]}
    if case["expect"] == "pass":
        assert flagged == {"timing": [], "launch": []}
        assert result["launch"]["launched"] and result["launch"]["custom_share"] > 0.9
        assert result["timing"]["recheck"]["passed"]
    else:
        text = " ".join(flagged[case["detector"]]).lower()
        assert any(k in text for k in case["keywords"]), flagged


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("relaxed", [False, True], ids=["static-rules-on", "static-rules-as-warnings"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_verify_rejects_gpu_only_hacks(case, relaxed):
    """Every hack is rejected; with the static rules turned down to warnings, by a GPU check."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from verify_gpu import judge, verify_options
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from kernelrag.verify import verify

    options = verify_options(relaxed)
    if options is None:
        pytest.skip("this verify() has no static policy option")
    v = verify(FIXTURES / case["task"], FIXTURES / case["candidate"], device="cuda", **options)
    ok, why = judge(case, v.to_dict(), relaxed)
    assert ok, f"{why}: {v.summary()} | warnings: {v.warnings}"
    if case["expect"] == "pass":
        assert v.timed and v.kernel_ms is not None, v.summary()


@pytest.mark.gpu
def test_ceilings_are_measured_and_cached(tmp_path):
    data = ceil.get_ceilings(tmp_path)
    assert data["copy_gbps"] > 0 and data["bf16_tflops"] > data["fp32_tflops"] > 0
    assert ceil.cache_path(tmp_path, data["gpu"]).is_file()
    assert ceil.get_ceilings(tmp_path)["measured_at"] == data["measured_at"]


@pytest.mark.gpu
def test_timing_flags_a_patched_event_timer(monkeypatch):
    x = torch.randn(4096, 4096, device="cuda")
    true_elapsed = torch.cuda.Event.elapsed_time
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.1 * true_elapsed(self, end))
    result = timing.time_against_baselines(torch.sigmoid, torch.sigmoid, None, lambda: (x.clone(),), iters=20,
                                           warmup=2)
    assert any("tampered" in b for b in result["blocking"])
    assert result["kernel"]["median_ms"] > 0


@pytest.mark.gpu
def test_launch_proof_on_a_torch_op_and_a_triton_kernel():
    import importlib.util

    spec = importlib.util.spec_from_file_location("honest_fixture", FIXTURES / "honest.py")
    honest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(honest)
    x, y = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
    good = launch.launch_proof(honest.ModelNew(), (x, y))
    assert good["launched"] and good["custom_share"] > 0.9 and good["blocking"] == []
    bad = launch.launch_proof(lambda a, b: a * torch.sigmoid(b), (x, y), custom_names=["gated_sigmoid_kernel"])
    assert bad["launched"] is False and bad["torch_kernels"] and bad["blocking"]


# ---- the timing loop with the CUDA layer simulated on the host ---------------------

class _HostClock:
    """Stands in for CUDA events and synchronize: events read the host clock, and
    ``pending_ms`` is work 'left on a side stream' that only a synchronize waits for."""

    def __init__(self):
        self.pending_ms = 0.0
        self.stream = types.SimpleNamespace(device=torch.device("cpu"))

    def install(self, monkeypatch):
        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

        def record(event, stream=None):
            event.t = time.perf_counter()

        def sync(device=None):
            time.sleep(self.pending_ms / 1e3)
            self.pending_ms = 0.0

        monkeypatch.setattr(timing, "_Event", Event)
        monkeypatch.setattr(timing, "_record", record)
        monkeypatch.setattr(timing, "_elapsed", lambda a, b: (b.t - a.t) * 1e3)
        monkeypatch.setattr(timing, "_event_sync", lambda event: None)
        monkeypatch.setattr(timing, "_sync", sync)
        monkeypatch.setattr(timing, "_current_stream", lambda: self.stream)
        monkeypatch.setattr(timing, "_is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 80 * 2**30))
        # host jitter on a busy CPU is far above a GPU's: widen the absolute margins
        monkeypatch.setattr(timing, "AFTER_END_ABS_MS", 2.0)
        monkeypatch.setattr(timing, "HOST_GAP_ABS_MS", 5.0)
        # a verifier process snapshots its watched functions when its Guard is installed
        # (after torch._dynamo's rewraps); this process may have imported dynamo since
        guard.take_snapshot()


def _gate(x, y):
    return x * torch.sigmoid(y)


def _run_simulated(monkeypatch, candidate, compile_fn=None, iters=30):
    clock = _HostClock()
    clock.install(monkeypatch)
    make = lambda: (torch.randn(64, 64), torch.randn(64, 64))   # noqa: E731
    fn = candidate(clock) if callable(candidate) and candidate.__name__.startswith("make_") else candidate
    return timing.time_against_baselines(fn, _gate, compile_fn, make, iters=iters, warmup=2, flush_bytes=1024)


def test_simulated_honest_candidate_has_no_findings(monkeypatch):
    result = _run_simulated(monkeypatch, _gate, compile_fn=_gate)
    assert result["blocking"] == [] and result["recheck"]["passed"]
    for name in ("kernel", "eager", "compile"):
        assert result[name]["trials"] == 30 and result[name]["median_ms"] >= 0
    assert result["wall_check"]["kernel_timed_by"] == "event"
    assert result["wall_check"]["input_slots"] == 2 and result["wall_check"]["input_contents"] == 3
    assert any("fewer than 100" in w for w in result["warnings"])


def test_simulated_side_stream_work_is_flagged_and_timed(monkeypatch):
    def make_side_stream(clock):
        def candidate(x, y):
            clock.pending_ms = 20.0           # returns at once; the device is busy 20 ms more
            return _gate(x, y)
        return candidate

    result = _run_simulated(monkeypatch, make_side_stream)
    assert any(b.startswith("side-stream or background work") for b in result["blocking"])
    assert result["wall_check"]["kernel_timed_by"] == "synced"
    assert result["kernel"]["median_ms"] >= 20.0               # the hidden work is in the reported time


def test_simulated_pointer_cache_fails_the_recheck(monkeypatch):
    memo = {}

    def cached(x, y):
        key = (x.data_ptr(), y.data_ptr())
        if key not in memo:
            memo[key] = _gate(x, y)
        return memo[key]

    result = _run_simulated(monkeypatch, cached)
    assert not result["recheck"]["passed"] and result["recheck"]["failed_rounds"] >= 1
    assert any("outputs produced during timing differ" in b for b in result["blocking"])
    memo.clear()
    monkeypatch.setattr(timing, "_urandom", lambda n: b"\x00" * n)     # every draw says "compare"
    result = _run_simulated(monkeypatch, cached)
    assert result["wall_check"]["rechecked_rounds"] == 30 and result["recheck"]["failed_rounds"] >= 20


def test_rechecks_are_sampled_after_each_round_and_always_cover_first_and_last(monkeypatch):
    calls, draws = [], []

    def urandom(n):
        draws.append(len(calls))          # candidate calls returned when the draw is made
        return b"\xff" * n                # "do not compare": only the first and last rounds are

    def lazy_in_the_middle(x, y):         # 2 warm-up calls, then round r is call 3 + r
        calls.append(1)
        return torch.zeros_like(x) if 5 <= len(calls) <= iters else _gate(x, y)

    iters = 60
    monkeypatch.setattr(timing, "_urandom", urandom)
    result = _run_simulated(monkeypatch, lazy_in_the_middle, iters=iters)
    assert result["wall_check"]["rechecked_rounds"] == 2 and result["recheck"]["passed"]
    assert draws == list(range(4, 4 + iters - 2))      # each draw after its round's call, never before
    monkeypatch.setattr(timing, "_urandom", os.urandom)
    calls.clear()
    result = _run_simulated(monkeypatch, lazy_in_the_middle, iters=iters)
    # 56 lazy rounds, each compared with probability 1/4: all unseen with probability 0.75**56 ~ 1e-7
    assert not result["recheck"]["passed"] and 2 < result["wall_check"]["rechecked_rounds"] < iters


def test_simulated_thread_and_broken_compile(monkeypatch):
    stop = threading.Event()
    started = []

    def threaded(x, y):
        if not started:
            started.append(threading.Thread(target=_idle, args=(stop,), name="gate-worker", daemon=True))
            started[0].start()
        return _gate(x, y)

    def broken_compile(x, y):
        raise RuntimeError("inductor exploded")

    try:
        result = _run_simulated(monkeypatch, threaded, compile_fn=broken_compile)
    finally:
        stop.set()
    assert result["compile"] is None and any("torch.compile baseline failed" in w for w in result["warnings"])
    assert any("gate-worker" in b for b in result["blocking"])
    assert result["wall_check"]["threads"]["started_by_candidate"]


def test_simulated_inputs_must_live_on_the_timing_device(monkeypatch):
    clock = _HostClock()
    clock.install(monkeypatch)
    clock.stream.device = torch.device("cuda", 0)
    with pytest.raises(ValueError, match="must return CUDA tensors"):
        timing.time_against_baselines(_gate, _gate, None, lambda: (torch.randn(4), torch.randn(4)))


# ---- the H200 bench script's logic ----------------------------------------------------

def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_verify_gpu", ROOT / "bench" / "verify_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_judges_verdicts():
    bench = _bench()
    control = next(c for c in bench.gpu_cases() if c["expect"] == "pass")
    hack = next(c for c in bench.gpu_cases() if c["name"] == "side_stream")
    assert bench.judge(control, {"ok": True}) == (True, "")
    assert not bench.judge(control, {"ok": False, "status": "rejected"})[0]
    assert not bench.judge(hack, {"ok": True, "status": "correct"})[0]
    static = {"ok": False, "status": "rejected", "reason": "side-stream: torch.cuda.Stream", "findings": []}
    assert bench.judge(hack, static) == (True, "")
    gpu = {"ok": False, "status": "rejected", "reason": "timing: x", "warnings": [],
           "findings": [{"rule": "timing", "message": "side-stream or background work: busy 0.2 ms"}]}
    assert bench.judge(hack, gpu, relaxed=True) == (True, "")
    vague = {"ok": False, "status": "rejected", "reason": "something else", "findings": []}
    assert "no reason mentions" in bench.judge(hack, vague, relaxed=True)[1]
    assert "status" in bench.judge(hack, {"ok": False, "status": "incorrect"}, relaxed=True)[1]
    cache = next(c for c in bench.gpu_cases() if c["name"] == "ptr_cache")
    assert bench.judge(cache, {"ok": False, "status": "incorrect"}, relaxed=True) == (True, "")


def test_bench_cases_and_usage_errors(capsys):
    bench = _bench()
    cases = bench.gpu_cases()
    assert [c["name"] for c in cases] == [c["name"] for c in CASES]
    assert all(Path(c["task"]).is_file() and Path(c["candidate"]).is_file() for c in cases)
    assert isinstance(bench.cpu_cases(), list)
    with pytest.raises(SystemExit) as exc:
        bench.main(["--direct", "no-such-fixture"])
    assert exc.value.code == 2 and "valid: honest" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([])                                       # --out is required


def test_clock_functions_refuse_a_clock_patched_before_import(monkeypatch):
    monkeypatch.setattr(timing, "_elapsed", lambda self, end: 0.0)
    with pytest.raises(KernelRAGError, match="patched before the verifier loaded"):
        timing.clock_functions()


def test_true_fp32_switch_restores_the_setting():
    before = torch.backends.cuda.matmul.fp32_precision
    restore = ceil._true_fp32(torch)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    restore()
    assert torch.backends.cuda.matmul.fp32_precision == before


def test_bench_finds_cpu_fixtures_by_layout(tmp_path, monkeypatch):
    bench = _bench()
    for rel in ("tasks/softmax.py", "tasks/softmax_online.py", "tasks/rownorm_weak.py", "positive/softmax.py",
                "positive/rownorm_weak.py", "positive/orphan.py", "hacks/softmax_noop.py", "hacks/zeros.py",
                "hacks/unrelated.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text('"""x"""\n')
    (tmp_path / "hacks/zeros.py").write_text('"""Returns zeros. Task: softmax_online."""\n')
    monkeypatch.setattr(bench, "CPU_FIXTURES", tmp_path)
    found = {c["name"]: (c["expect"], Path(c["task"]).stem) for c in bench.cpu_cases()}
    assert found == {"positive/softmax": ("pass", "softmax"), "positive/rownorm_weak": ("weak_task", "rownorm_weak"),
                     "hacks/softmax_noop": ("reject", "softmax"), "hacks/zeros": ("reject", "softmax_online")}
    weak = {"expect": "weak_task"}
    assert bench.judge(weak, {"ok": False, "status": "weak_task"}) == (True, "")
    assert not bench.judge(weak, {"ok": True, "status": "correct"})[0]
    (tmp_path / "cases.json").write_text(json.dumps({"cases": [
        {"name": "a", "task": "tasks/softmax.py", "candidate": "hacks/zeros.py", "expect": "rejected"}]}))
    assert [(c["name"], c["expect"]) for c in bench.cpu_cases()] == [("a", "reject")]


def test_launch_proof_flow_with_the_profiler_simulated(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(launch, "_profiler_works", lambda torch: (True, ""))
    calls = []

    def candidate(x):
        calls.append(x)
        return x

    monkeypatch.setattr(launch, "_profile_kernels",
                        lambda torch, fn, args: fn(*args) and [("my_kernel", 10.0), ("Memset (Device)", 1.0)])
    proof = launch.launch_proof(candidate, (1,), source="@triton.jit\ndef my_kernel():\n    pass\n", warmup=3)
    assert len(calls) == 4 and proof["launched"] and proof["custom_share"] == pytest.approx(10 / 11)
    assert proof["known_custom_names"] == ["my_kernel"] and proof["torch_kernels"] == ["Memset (Device)"]

    def broken_profiler(torch, fn, args):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(launch, "_profile_kernels", broken_profiler)
    unknown = launch.launch_proof(candidate, (1,))
    assert unknown["launched"] is None and "CUPTI_ERROR" in unknown["warnings"][0] and not unknown["blocking"]
    monkeypatch.setattr(launch, "_profiler_works", lambda torch: (False, "no CUPTI"))
    assert launch.launch_proof(candidate, (1,))["launched"] is None


def test_launch_proof_lets_the_candidates_own_error_through(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(launch, "_profiler_works", lambda torch: (True, ""))

    class FakeProfile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    import torch.profiler as tp
    monkeypatch.setattr(tp, "profile", FakeProfile)
    state = {"n": 0}

    def flaky(x):
        state["n"] += 1
        if state["n"] > 1:                 # fine in warm-up, fails when profiled
            raise ZeroDivisionError("candidate bug")
        return x

    with pytest.raises(ZeroDivisionError, match="candidate bug"):
        launch.launch_proof(flaky, (1,), warmup=1)


def test_the_baseline_process_times_fp32_without_tf32():
    """PyTorch enables TF32 in cuDNN by default: a baseline process that kept it timed eager
    and compiled convolutions at TF32 while candidates ran at fp32 (drift x2.5-4.6 on the
    H200, 2026-12-02). The baseline pins the candidate's numerics before anything runs."""
    from kernelrag.verify.compiled import Baseline

    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = cudnn.allow_tf32, torch.get_float32_matmul_precision()
    task = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n" \
           "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n"
    try:
        cudnn.allow_tf32, matmul.allow_tf32 = True, True
        Baseline(lambda message: None).compile({"source": task, "seed": 1})   # no GPU: fails after pinning
        assert (cudnn.allow_tf32, matmul.allow_tf32) == (False, False)
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        cudnn.allow_tf32 = saved[0]
        torch.set_float32_matmul_precision(saved[1])
