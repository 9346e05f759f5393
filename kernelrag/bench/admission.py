"""Which task the benchmark starts next, so the tasks in flight fit in the GPU's memory.

Each task in flight holds several copies of its inputs and outputs on the GPU at once:
the reference process's trials and its torch.compile baseline, the candidate's timing
slots and the contents rotated through them, eager's and torch.compile's outputs.
``TASK_MEMORY_COPIES`` of a task's bytes (inputs, weights and outputs once, as the
roofline counts them) is its footprint. On 2026-12-05 five 4.3 GB tasks in flight fit in
an H200's 141 GB but not in an 80 GB H100, where 26 of 79 tasks ran out of memory; at six
copies, 16 still did: one candidate process held up to 14 GiB, and a configuration search
runs several candidates of a task at once. A verification that still runs short is
verified again alone in the session (``verify.gate.MemoryRoom``); the other tasks in
flight still hold their own memory then (their reference processes, their compiled
baselines), so a task that comes back untimed for want of memory runs once more at the
end, alone on the GPU (``run_alone``: nothing else starts beside it).

The next task started is the first one in the queue whose footprint fits beside those
in flight; with none in flight, the first one starts whatever its size.
"""
from __future__ import annotations

from pathlib import Path

TASK_MEMORY_COPIES = 8        # copies of a task's inputs and outputs held on the GPU at once
GPU_MEMORY_SHARE = 0.9        # of the GPU's memory, for the tasks in flight (the rest: CUDA contexts)


def task_bytes(path: Path) -> int:
    """A task's inputs, weights and outputs, counted once on the meta device (no memory used);
    0 when the task cannot be counted (it is then never held back)."""
    from kernelrag.verify.correctness import load_task
    from kernelrag.verify.counting import count

    try:
        return int(count(load_task(path.read_text(), path.stem)).bytes_moved or 0)
    except Exception:  # noqa: BLE001 - an uncountable task is admitted as if small; the verifier reports it
        return 0


class MemoryAdmission:
    """Footprints of the tasks in flight, against ``GPU_MEMORY_SHARE`` of ``gpu_memory_b``
    (None: no limit, e.g. on a CPU)."""

    def __init__(self, gpu_memory_b: int | None, sizes_b: dict[str, int] | None = None):
        self.budget_b = int(GPU_MEMORY_SHARE * gpu_memory_b) if gpu_memory_b else None
        self._sizes_b = dict(sizes_b or {})     # task name -> bytes, counted once
        self._in_flight: list[tuple[str, int]] = []   # (task name, footprint) of each task started
        self.alone: set[str] = set()    # tasks that run with nothing beside them (``run_alone``)

    def footprint_b(self, path: Path) -> int:
        if path.stem not in self._sizes_b:
            self._sizes_b[path.stem] = task_bytes(path)
        return TASK_MEMORY_COPIES * self._sizes_b[path.stem]

    def run_alone(self, path: Path) -> None:
        """From now on ``path`` starts only with no task in flight, and none starts beside it."""
        self.alone.add(path.stem)

    def pick(self, queue: list[Path]) -> int | None:
        """Index in ``queue`` of the first task that fits beside those in flight, or None
        (wait for one to finish). A task to run alone fits only where none is in flight, and
        nothing fits beside one."""
        if not queue:
            return None
        if not self._in_flight:
            return 0
        if any(name in self.alone for name, _ in self._in_flight):
            return None
        held_b = sum(b for _, b in self._in_flight)
        return next((i for i, p in enumerate(queue) if p.stem not in self.alone
                     and (self.budget_b is None or held_b + self.footprint_b(p) <= self.budget_b)), None)

    def started(self, path: Path) -> None:
        self._in_flight.append((path.stem, self.footprint_b(path) if self.budget_b is not None else 0))

    def finished(self, path: Path) -> None:
        held = next((entry for entry in self._in_flight if entry[0] == path.stem), None)
        if held is not None:
            self._in_flight.remove(held)

    def describe(self) -> str:
        if self.budget_b is None:
            return "no GPU memory limit on tasks in flight"
        return (f"tasks in flight fit in {self.budget_b / 1e9:.0f} GB of GPU memory "
                f"({TASK_MEMORY_COPIES} copies of each task's inputs and outputs)")
