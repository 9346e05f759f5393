"""The configuration search of a verified tunable kernel, through the verifier, remembered.

A kernel that lists its ``triton.Config`` choices in a module-level ``CONFIGS`` list (and
hands it to ``@triton.autotune``) is, once verified on a GPU, searched further here: each
of the top ``top_k`` configurations, ranked by the graph's evidence for the pattern
(``tuning.rank_configs``), is pinned into the source (``tuning.pinned_source``: one
config, so Triton's own autotuner has nothing to benchmark) and verified as a candidate
of its own: fresh inputs, correctness, timing interleaved with eager, each in its own
sandboxed process. Nothing is timed outside the verifier's protocol.

Every result is written back (``tuning.TuningStore`` under the tuning key, and one graph
record per configuration, the losing and failing ones included). The key is the one
``tuning.TuningKey`` defines, with the task's input and output shapes as the key values:
the next task with the same kernel source, shapes, dtypes, GPU and versions skips the
search, after its stored winner is verified again (a cached configuration has produced
wrong outputs elsewhere); a winner that fails is marked and the search runs again.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelrag.memory.storage import now_utc
from kernelrag.memory.tuning import (TuningKey, TuningStore, config_id, pinned_source, rank_configs,
                                     record_configs, source_configs)

TRANSFORMATION = "autotuned_block_sizes"
UNTIMED = "untimed"      # correct, but other processes held the GPU's memory: timed by the next search


@dataclass
class SearchResult:
    """What a search found: the winning configuration's source and verdict, when one won."""

    key_id: str
    winner: dict[str, Any] | None = None
    winner_source: str = ""
    winner_verdict: Any = None
    from_memory: bool = False                   # the stored winner was verified again and held
    tried: list[tuple[str, Any]] = field(default_factory=list)   # (config id, verdict), in order
    graph_records: int = 0
    note: str = ""


def tuning_key(source: str, verdict: Any, regime: dict[str, Any]) -> TuningKey:
    """The key of ``source`` on this task: shapes as key values, the verdict's GPU and versions."""
    values = {"input_shapes": json.dumps(regime.get("input_shapes")),
              "output_shape": json.dumps(regime.get("output_shape"))}
    env = {"gpu": verdict.gpu, "torch": verdict.torch_version, "triton": verdict.triton_version}
    return TuningKey.make(source, values, list(regime.get("dtypes") or []), env)


def searchable(source: str, verdict: Any) -> bool:
    """A correct, timed kernel with at least two configurations to choose from."""
    return bool(verdict is not None and verdict.correct and verdict.kernel_ms is not None and verdict.gpu
                and len(source_configs(source)) > 1)


# A round without configurations may be kept over one with them that a search could still
# make faster: rows of 16384 in registers (0.79x torch.compile, H200) over the looped passes,
# whose 32-warp configuration ran 1.37x its default's speed (H100, 2026-12-05). A kernel more
# than this many times slower than the kept one is not searched.
TUNE_REACH = 1.6


def tunable_round(rounds: list, kept: Any) -> Any:
    """The round whose configurations a search explores: the kept round when it has them,
    else the fastest verified round that has, within ``TUNE_REACH`` of the kept one's time."""
    if searchable(kept.draft, kept.verdict):
        return kept
    if kept.verdict is None or kept.verdict.kernel_ms is None:
        return None
    others = [r for r in rounds if r is not kept and r.ok and searchable(r.draft, r.verdict)
              and r.verdict.kernel_ms.median_ms <= TUNE_REACH * kept.verdict.kernel_ms.median_ms]
    return min(others, key=lambda r: r.verdict.kernel_ms.median_ms, default=None)


def faster_than(a: Any, b: Any) -> bool:
    """Verdict ``a``'s kernel beats ``b``'s: by their speedups over eager where both have one
    (each measured side by side with eager, so drift between the runs cancels), else by time."""
    if a.speedup_vs_eager and b.speedup_vs_eager:
        return a.speedup_vs_eager > b.speedup_vs_eager
    return a.kernel_ms.median_ms < b.kernel_ms.median_ms


def search_configs(source: str, verdict: Any, verify: Callable[[str], Any], store: TuningStore, *,
                   regime: dict[str, Any], graph: Any = None, pattern: str | None = None,
                   transformations: list[str] | None = None, top_k: int = 4, log_id: str = "",
                   skill: str | None = None,
                   verify_all: Callable[[list[str]], list[Any]] | None = None) -> SearchResult:
    """Search the configurations of the verified ``source`` (see the module docstring).
    ``verify(candidate_source)`` returns the verifier's Verdict on the task;
    ``verify_all(sources)`` the Verdicts of several (a session verifies them side by side,
    each timed alone), else they are verified one by one."""
    key = tuning_key(source, verdict, regime)
    result = SearchResult(key.id)
    entry = store.get(key) or {}
    stored = dict(entry.get("results", {}))
    held_before = [cid for cid, r in stored.items() if r.get("status") == UNTIMED]
    winner_id = entry.get("winner")
    rechecked = None                  # the stored winner verified again and timed
    if winner_id and winner_id in stored:
        pinned = pinned_source(source, stored[winner_id]["config"], note=f"tuned: {winner_id}")
        again = verify(pinned)
        result.tried.append((winner_id, again))
        if _timed_ok(again) and not held_before:
            result.winner, result.winner_source, result.winner_verdict = stored[winner_id]["config"], pinned, again
            result.from_memory = True
            result.note = f"stored winner {winner_id} verified again: {_ms(again)}"
            return result
        if _timed_ok(again):
            rechecked = again
            result.note = f"stored winner {winner_id} verified again ({_ms(again)}); timing those left untimed. "
        elif getattr(again, "untimed_cause", None):
            result.note = f"stored winner {winner_id} correct but untimed again (GPU memory held elsewhere). "
        else:
            stored[winner_id] = {**stored[winner_id], "status": "incorrect",
                                 "detail": f"stored winner failed when verified again: {again.reason}"[:300]}
            result.note = f"stored winner {winner_id} failed when verified again ({again.status}); searched again. "
    ranked = rank_configs(source_configs(source), graph, pattern, key.gpu)
    fresh = [c for c in ranked if config_id(c) not in stored or config_id(c) in held_before]
    todo = [c for c in fresh if config_id(c) in held_before] if held_before else fresh[:max(0, top_k)]
    sources = {config_id(cfg): pinned_source(source, cfg, note=f"tuned: {config_id(cfg)}") for cfg in todo}
    verdicts = (verify_all or (lambda srcs: [verify(x) for x in srcs]))(list(sources.values()))
    held: list[str] = []          # correct but untimed: the GPU's memory was held by other processes
    for cfg, v in zip(todo, verdicts):
        cid = config_id(cfg)
        result.tried.append((cid, v))
        if not _timed_ok(v) and getattr(v, "untimed_cause", None):
            held.append(cid)      # stored as untimed, no graph record: the next search times it
            stored[cid] = {"config": cfg, "date": now_utc(), "status": UNTIMED, "detail": v.reason[:300]}
            continue
        stored[cid] = {"config": cfg, "date": now_utc(), **_result(v)}
    if rechecked is not None:
        w = rechecked.kernel_ms
        stored[winner_id] = {**stored[winner_id], "status": "ok", "median_ms": w.median_ms, "iqr_ms": w.iqr_ms,
                             "trials": w.trials, "date": now_utc()}
        sources.setdefault(winner_id, pinned_source(source, stored[winner_id]["config"],
                                                    note=f"tuned: {winner_id}"))
    ok = {cid: r for cid, r in stored.items() if r.get("status") == "ok" and r.get("median_ms")}
    best = min(ok, key=lambda cid: ok[cid]["median_ms"]) if ok else None
    store.update(key, stored, best)
    timed_ids = [config_id(c) for c in todo if config_id(c) not in held]
    if graph is not None and pattern and timed_ids:
        result.graph_records = record_configs(graph, key, timed_ids, stored, best, pattern,
                                              list(transformations or []), regime, log_id, skill)
    if best is not None and best in sources:
        result.winner, result.winner_source = stored[best]["config"], sources[best]
        result.winner_verdict = dict(result.tried)[best]
    elif best is not None:       # a configuration timed by an earlier search is best: verify it here too
        pinned = pinned_source(source, stored[best]["config"], note=f"tuned: {best}")
        again = verify(pinned)
        result.tried.append((best, again))
        if _timed_ok(again):
            result.winner, result.winner_source, result.winner_verdict = stored[best]["config"], pinned, again
    timed = ", ".join(f"{cid}: {_ms(v)}" for cid, v in result.tried) or "nothing new to time"
    result.note += f"{len(timed_ids)} configuration(s) timed ({timed})"
    if held:
        result.note += f"; {', '.join(held)} untimed (GPU memory held by other processes), left for the next search"
    return result


def _timed_ok(v: Any) -> bool:
    return bool(v is not None and v.correct and v.kernel_ms is not None)


def _result(v: Any) -> dict[str, Any]:
    if _timed_ok(v):
        return {"status": "ok", "median_ms": v.kernel_ms.median_ms, "iqr_ms": v.kernel_ms.iqr_ms,
                "trials": v.kernel_ms.trials}
    status = v.status if v.status in ("incorrect", "compile_error") else "crashed"
    return {"status": status, "detail": f"{v.status}: {v.reason}"[:300]}


def _ms(v: Any) -> str:
    return f"{v.kernel_ms.median_ms:.4g} ms" if _timed_ok(v) else v.status


__all__ = ["SearchResult", "search_configs", "searchable", "tuning_key", "TRANSFORMATION"]
