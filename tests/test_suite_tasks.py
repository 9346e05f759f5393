"""The benchmark suite's task files: each loads, declares honest counts and traces to a known pattern.

Everything runs on the meta device, so the tasks' GPU sizes cost nothing here.
"""
from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from kernelrag.patterns import op_pattern
from kernelrag.verify.correctness import load_task
from kernelrag.verify.counting import count

ROOT = Path(__file__).resolve().parent.parent
SUITE = sorted((ROOT / "bench" / "tasks").glob("*.py"))


def test_suite_is_not_empty_and_readme_states_its_size():
    assert len(SUITE) >= 70, f"bench/tasks/ holds {len(SUITE)} tasks"
    stated = re.search(r"`bench/tasks/`: (\d+) KernelBench-format tasks", (ROOT / "README.md").read_text())
    assert stated, "README.md no longer states the suite's size as `bench/tasks/`: N KernelBench-format tasks"
    assert int(stated.group(1)) == len(SUITE), \
        f"README.md says {stated.group(1)} suite tasks, bench/tasks/ holds {len(SUITE)}: update the README"


@pytest.mark.parametrize("path", SUITE, ids=[p.stem for p in SUITE])
def test_task_declares_counts_and_traces(path):
    mod = load_task(path.read_text(), path.stem)
    flops, n_bytes = int(mod.get_flops()), int(mod.get_bytes())
    assert flops > 0 and n_bytes > 0, f"{path.name}: get_flops()={flops}, get_bytes()={n_bytes}"
    # what the roofline would count with no declarations: every input, parameter, buffer and
    # output once, and the matmul / convolution / attention FLOPs
    counted = count(types.SimpleNamespace(Model=mod.Model, get_inputs=mod.get_inputs,
                                          get_init_inputs=mod.get_init_inputs))
    assert counted.source == "counted", counted.source
    assert n_bytes == counted.bytes_moved, \
        f"{path.name}: get_bytes()={n_bytes}, but inputs + parameters + outputs once = {counted.bytes_moved}"
    # the roofline prices reads and writes apart: the declared task carries the counted split
    declared = count(mod)
    assert (declared.source, declared.bytes_read, declared.bytes_written) == \
        ("declared", counted.bytes_read, counted.bytes_written), declared
    assert flops >= counted.flops, \
        f"{path.name}: get_flops()={flops} is below the counted matmul/conv FLOPs {counted.flops}"
    p = op_pattern(path)
    assert p.known, f"{path.name}: {p.reason}"
    assert p.signature != "identity" and p.regime.get("input_shapes"), p
