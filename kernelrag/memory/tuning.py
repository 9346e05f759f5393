"""Autotuning that memory remembers: every configuration timed once per key, kept.

A tuning key is what Triton's own autotune cache keys a result by: the kernel's
source hash, the values of the tuning-key arguments (M, N, K) and the dtypes of the
tensor arguments, plus what makes a timing stale elsewhere: the GPU name and the
torch and triton versions. ``autotune``:

1. looks the key up in the ``TuningStore`` (``<cache_dir>/tuning.json``). A stored
   winner is re-verified first (its output checked against the reference again:
   cached configurations have produced wrong outputs elsewhere) and, if it holds,
   returned without any timing: the search is skipped;
2. otherwise ranks the configurations by the graph's evidence (``rank_configs``:
   how close each came to the best one on this pattern, then on related patterns),
   times the top ``top_k`` that the store has not timed yet with the verifier's
   protocol (``kernelrag.verify.tune``), and writes every result back: the store
   entry, and one graph record per configuration, the losing and failing ones
   included (outcome "success" for the winner, "slower", "incorrect",
   "compile_error" for the rest).

Standard library (torch only through the timer, on first use).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelrag.errors import KernelRAGError
from kernelrag.memory.storage import atomic_write_text, file_lock, now_utc
from kernelrag.patterns import heavy_ops, similarity

STORE_FORMAT = "kernelrag-tuning"
STORE_FILE = "tuning.json"
UNSEEN_SCORE = 0.5      # a configuration with no evidence ranks after those that came within 50% of the best
META_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def config_dict(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` (or a dict) as one flat dict: meta-parameters plus warps and stages."""
    if isinstance(config, dict):
        return dict(config)
    out = dict(getattr(config, "kwargs", {}) or {})
    for key in META_KEYS:
        value = getattr(config, key, None)
        if value is not None and not (key == "num_ctas" and value == 1):
            out[key] = value
    return out


def config_id(config: Any) -> str:
    """A stable name: ``BLOCK_K=64,BLOCK_M=128,...,num_stages=3,num_warps=8``."""
    return ",".join(f"{k}={v}" for k, v in sorted(config_dict(config).items()))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass(frozen=True)
class TuningKey:
    source_sha256: str                   # the kernel module's source
    key: tuple[tuple[str, Any], ...]     # tuning-key argument values, e.g. (("K", 4096), ("M", 4096), ...)
    dtypes: tuple[str, ...]              # of the tensor arguments, in order
    gpu: str
    torch: str
    triton: str

    @classmethod
    def make(cls, source: str, key: dict[str, Any], dtypes: list[str], env: dict[str, Any]) -> "TuningKey":
        missing = [k for k in ("gpu", "torch", "triton") if not env.get(k)]
        if missing:
            raise KernelRAGError(f"a tuning key needs the GPU name and the torch and triton versions; "
                                 f"missing {missing} in {env!r}")
        return cls(source_hash(source), tuple(sorted((str(k), v) for k, v in key.items())),
                   tuple(str(d).replace("torch.", "") for d in dtypes), str(env["gpu"]), str(env["torch"]),
                   str(env["triton"]))

    @property
    def id(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:24]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["key"] = dict(self.key)
        data["dtypes"] = list(self.dtypes)
        return data


class TuningStore:
    """Per-key configuration results in one JSON file, written atomically under a lock."""

    def __init__(self, cache_dir: "str | Path"):
        self.path = Path(cache_dir) / STORE_FILE

    def _read(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {"format": STORE_FORMAT, "entries": {}}
        try:
            data = json.loads(self.path.read_text())
        except ValueError as exc:
            raise KernelRAGError(f"{self.path} is not valid JSON ({exc}); delete it to start the tuning "
                                 "memory again") from None
        if data.get("format") != STORE_FORMAT:
            raise KernelRAGError(f"{self.path} is not a {STORE_FORMAT} file; move it away")
        return data

    def get(self, key: TuningKey) -> dict[str, Any] | None:
        return self._read()["entries"].get(key.id)

    def update(self, key: TuningKey, results: dict[str, dict[str, Any]], winner: str | None) -> dict[str, Any]:
        """Merge ``results`` (config id -> result) into the key's entry and set its winner."""
        with file_lock(self.path):
            data = self._read()
            entry = data["entries"].setdefault(key.id, {"key": key.to_dict(), "results": {}})
            entry["results"].update(results)
            entry["winner"] = winner
            entry["updated"] = now_utc()
            atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        return entry


def rank_configs(configs: list[Any], graph: Any = None, pattern: str | None = None,
                 gpu: str | None = None) -> list[dict[str, Any]]:
    """Configurations best-first by the graph's evidence for ``pattern`` on ``gpu``.

    A configuration's score is the mean of ``best_ms / config_ms`` over its records
    (1.0: it won), records on related patterns (sharing a heavy op, e.g. ``matmul`` for
    ``matmul>add>relu``) weighted by pattern similarity x 0.5; a failed record scores 0.
    Configurations without evidence score ``UNSEEN_SCORE`` and keep their given order.
    """
    dicts = [config_dict(c) for c in configs]
    if graph is None or pattern is None:
        return dicts
    scores: dict[str, list[tuple[float, float]]] = {}
    heavy = heavy_ops(pattern)
    for other in graph.patterns():
        weight = 1.0 if other == pattern else (0.5 * similarity(pattern, other) if heavy & heavy_ops(other) else 0)
        if weight <= 0:
            continue
        for record in graph._records(other, "autotuned_block_sizes", gpu):
            cid = record.get("config")
            if not cid:
                continue
            value = float(record.get("rel_to_best") or 0.0) if record.get("outcome") in ("success", "slower") else 0.0
            scores.setdefault(cid, []).append((value, weight))

    def score(cfg: dict[str, Any]) -> float:
        got = scores.get(config_id(cfg))
        return sum(v * w for v, w in got) / sum(w for _, w in got) if got else UNSEEN_SCORE

    order = {config_id(c): i for i, c in enumerate(dicts)}
    return sorted(dicts, key=lambda c: (-score(c), order[config_id(c)]))


def source_configs(source: str) -> list[dict[str, Any]]:
    """The configurations of a kernel source's module-level ``CONFIGS = [triton.Config(...)]``
    list, read without running it (literal arguments only); [] when there is none."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    target = next((n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "CONFIGS"), None)
    if target is None or not isinstance(target.value, (ast.List, ast.Tuple)):
        return []
    configs = []
    for call in target.value.elts:
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", getattr(call.func, "id", "")) == "Config"):
            return []
        try:
            meta = ast.literal_eval(call.args[0]) if call.args else {}
            extra = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg in META_KEYS}
        except ValueError:
            return []
        if not isinstance(meta, dict):
            return []
        configs.append({**meta, **extra})
    return configs


def pinned_source(source: str, config: dict[str, Any], note: str = "") -> str:
    """The kernel source with its module-level ``CONFIGS = [...]`` reduced to ``config``.

    A tuned kernel then launches the remembered winner directly instead of letting
    ``triton.autotune`` benchmark every configuration again on first call.
    """
    import ast

    tree = ast.parse(source)
    target = next((n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "CONFIGS"), None)
    if target is None:
        raise KernelRAGError("the kernel source has no module-level CONFIGS = [...] list to pin; "
                             "a tunable skill lists its triton.Config objects there")
    meta = {k: v for k, v in config.items() if k not in META_KEYS}
    extra = "".join(f", {k}={config[k]!r}" for k in META_KEYS if k in config)
    comment = f"  # {note}" if note else ""
    line = f"CONFIGS = [triton.Config({meta!r}{extra})]{comment}"
    lines = source.splitlines(keepends=True)
    start, end = target.lineno - 1, target.end_lineno
    return "".join(lines[:start]) + line + "\n" + "".join(lines[end:])


@dataclass
class TuneResult:
    key_id: str
    winner: dict[str, Any] | None
    winner_ms: float | None
    from_cache: bool                     # the stored winner was re-verified and used: no timing
    reverified: str = ""                 # what the re-verification of a stored winner found
    timed: list[str] = field(default_factory=list)      # config ids timed in this call
    results: dict[str, dict[str, Any]] = field(default_factory=dict)   # every stored result of the key
    graph_records: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def autotune(key: TuningKey, configs: list[Any], launch: Callable[[dict[str, Any]], Any],
             check: Callable[[Any], "tuple[bool, str]"], store: TuningStore, *, graph: Any = None,
             pattern: str | None = None, transformations: list[str] | None = None, top_k: int = 4,
             regime: dict[str, Any] | None = None, log_id: str = "", skill: str | None = None,
             timer: Callable[..., dict[str, dict[str, Any]]] | None = None,
             timer_options: dict[str, Any] | None = None) -> TuneResult:
    """The best configuration of ``configs`` for ``key``: from memory when it still holds.

    ``launch(config)`` runs the kernel with one configuration and returns its output;
    ``check(output)`` compares it with the reference: ``(passed, detail)``. ``timer`` is
    ``kernelrag.verify.tune.time_configs`` by default (``time_configs_cpu`` for a dry run).
    """
    if top_k < 1:
        raise KernelRAGError(f"top_k={top_k} must be at least 1")
    entry = store.get(key) or {}
    stored = dict(entry.get("results", {}))
    winner_id = entry.get("winner")
    reverified = ""
    if winner_id and winner_id in stored:
        cfg = stored[winner_id]["config"]
        try:
            passed, detail = check(launch(cfg))
        except Exception as exc:   # noqa: BLE001 - a cached config that no longer builds is a failed re-check
            passed, detail = False, f"{type(exc).__name__}: {exc}"
        if passed:
            return TuneResult(key.id, cfg, stored[winner_id].get("median_ms"), True,
                              f"stored winner re-verified: {detail}"[:300], [], stored)
        reverified = f"stored winner {winner_id} failed re-verification: {detail}"[:300]
        stored[winner_id] = {**stored[winner_id], "status": "incorrect", "detail": reverified}
    ranked = rank_configs(configs, graph, pattern, key.gpu)
    todo = [c for c in ranked if config_id(c) not in stored][:top_k]
    if timer is None:
        from kernelrag.verify.tune import time_configs as timer
    measured = timer({config_id(c): (lambda c=c: launch(c)) for c in todo}, check=check,
                     **(timer_options or {})) if todo else {}
    date = now_utc()
    for cfg in todo:
        stored[config_id(cfg)] = {"config": cfg, "date": date, **measured.get(config_id(cfg), {})}
    ok = {cid: r for cid, r in stored.items() if r.get("status") == "ok" and r.get("median_ms")}
    best = min(ok, key=lambda cid: ok[cid]["median_ms"]) if ok else None
    store.update(key, stored, best)
    n_records = 0
    if graph is not None and pattern is not None and todo:
        n_records = record_configs(graph, key, [config_id(c) for c in todo], stored, best, pattern,
                            transformations or [], regime, log_id, skill)
    return TuneResult(key.id, stored[best]["config"] if best else None, ok[best]["median_ms"] if best else None,
                      False, reverified, [config_id(c) for c in todo], stored, n_records)


def record_configs(graph: Any, key: TuningKey, timed: list[str], stored: dict[str, dict[str, Any]],
                   best: str | None, pattern: str, transformations: list[str], regime: dict[str, Any] | None,
                   log_id: str, skill: str | None) -> int:
    """One graph record per configuration timed: the winner "success", the rest "slower",
    "incorrect", "compile_error" or "crashed"; the number written."""
    best_ms = stored[best]["median_ms"] if best else None
    tids = list(dict.fromkeys([*transformations, "autotuned_block_sizes"]))
    records = []
    for cid in timed:
        r = stored[cid]
        status = r.get("status")
        if status == "ok" and r.get("median_ms"):
            outcome = "success" if cid == best else "slower"
            rel = best_ms / r["median_ms"] if best_ms else None
            detail = f"config {cid}: {r['median_ms']:.4g} ms (IQR {r.get('iqr_ms', 0):.2g}, {r.get('trials')} calls)"
        else:
            outcome = status if status in ("incorrect", "compile_error") else "crashed"
            rel = 0.0
            detail = f"config {cid}: {r.get('detail', status)}"
        records.append(dict(pattern=pattern, transformations=tids, gpu=key.gpu, outcome=outcome,
                            dtype=key.dtypes[0] if key.dtypes else None, regime=dict(regime or {}),
                            log_id=log_id or f"tune-{key.id}", skill=skill,
                            versions={"torch": key.torch, "triton": key.triton}, detail=detail,
                            kernel_ms=r.get("median_ms"), config=cid, rel_to_best=rel, tuning_key=key.id,
                            iqr_ms=r.get("iqr_ms"), trials=r.get("trials")))
    return len(graph.record_many(records))
