"""The conv template's layouts side by side on a GPU: each suite convolution lowered in every
conv variant it is offered (``implicit_gemm``: the input gathered as it lies, NCHW;
``channels_last``: K as (tap, channel), the input made channels-last once), and each
implicit-GEMM draft twice: with its 3xTF32 weight split into TF32 parts before the kernel
(``+split_weight``: the launcher's ``split_b`` forced on) and without (the row with no
``split_weight``: forced off), whichever the launcher's CUDA default is (on for 2-D
convolutions since 2026-12-07), and with ``--warps8`` each of those again with the conv
table's 128 x 64 tile on 8 warps instead of 4 (``+warps8``), all verified
through one ``VerifySession``, so every ratio is measured in one run against the same eager
anchor. Writes a results file and one evidence record per verdict (the variant's
transformations) into the reasoning graph of ``$KERNELRAG_HOME`` (``--no-record``: not), so
the generate loop's ranking learns the layout.

    PYTHONPATH=. python3 bench/conv_variants.py --device cuda --out bench/results/conv-variants-h200-<date>.json
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelrag.bench.variants import arguments, report_head, verify_rows, write_report  # noqa: E402
from kernelrag.config import load_settings  # noqa: E402
from kernelrag.draft.lower.lowering import lower, variant_choices  # noqa: E402
from kernelrag.memory.graph import ReasoningGraph  # noqa: E402
from kernelrag.memory.writeback import record_evidence  # noqa: E402

CONV_VARIANTS = ("implicit_gemm", "channels_last", "direct")
TASKS = sorted(p for p in (ROOT / "bench" / "tasks").glob("*.py") if "conv" in p.stem)


def drafts(tasks: list[Path], folder: Path, warps8: bool = False) -> list[dict]:
    """One row per (task, variant combination), its candidate written to ``folder``; with
    ``warps8``, each implicit-GEMM row again with the conv table's 128 x 64 tile on 8 warps."""
    rows = []
    for task in tasks:
        source = task.read_text()
        for combo in variant_choices(source):
            draft = lower(source, task.stem, combo)
            row = {"task": task.stem, "variants": list(combo), "draft_ok": draft.ok,
                   "conv": next((v for v in combo if v in CONV_VARIANTS), None)}
            gemm_conv = draft.ok and any(v in ("implicit_gemm", "channels_last") for v in combo)
            if gemm_conv and SPLIT_DEFAULT not in draft.source:
                raise SystemExit(f"{task.stem} {combo}: no conv launcher signature {SPLIT_DEFAULT!r} to force the "
                                 "weight split in; update SPLIT_DEFAULT to the conv template's launcher")
            if not draft.ok:
                rows.append({**row, "reason": draft.reason})
                continue
            own = [({"variants": list(combo), "transformations": draft.transformations}, draft.source)]
            if gemm_conv:   # the weight split forced off and on, whatever the launcher's default
                unsplit = [t for t in draft.transformations if t != "tf32_split_pass"]
                own = [({"variants": list(combo), "transformations": unsplit}, forced_split(draft.source, False)),
                       ({"variants": [*combo, "split_weight"], "transformations": [*unsplit, "tf32_split_pass"]},
                        forced_split(draft.source, True))]
            if gemm_conv and warps8:
                wide = [(dict(r, variants=[*r["variants"], "warps8"]), wide_warps(text)) for r, text in own]
                if any(text is None for _, text in wide):
                    raise SystemExit(f"{task.stem} {combo}: no {WIDE_TILE[0]!r} row in its CONV_TILES; update "
                                     "WIDE_TILE to the conv table's 128 x 64 row")
                own += wide
            for fields, text in own:
                path = folder / f"{task.stem}__{'_'.join(fields['variants'])}.py"
                path.write_text(text)
                rows.append({**row, "path": str(task), "candidate": str(path), **fields})
    return rows


SPLIT_DEFAULT = "precision=None, split_b=None):"   # the conv launcher's signature: the default decides


def forced_split(source: str, on: bool) -> str | None:
    """The draft with its conv launchers' weight split forced on or off, or None where it has none."""
    return source.replace(SPLIT_DEFAULT, f"precision=None, split_b={on}):") if SPLIT_DEFAULT in source else None


# the conv table's 128 x 64 row, 4 warps -> 8: on sm_90 (triton 3.9) the 4-warp kernel spills with
# the weight split (392 bytes in 2-D) and in 3-D (52-3,856 bytes); on 8 warps none of them does
WIDE_TILE = ("(128, 64, 32, 4, 4)),", "(128, 64, 32, 8, 4)),")


def wide_warps(source: str) -> str | None:
    """The draft with the 128 x 64 row of each CONV_TILES literal on 8 warps, or None where it has none."""
    out, at, changed = [], 0, False
    while (start := source.find("CONV_TILES = (", at)) >= 0:
        end = source.index("\n)\n", start)
        block = source[start:end]
        changed |= WIDE_TILE[0] in block
        out += [source[at:start], block.replace(*WIDE_TILE)]
        at = end
    return "".join(out) + source[at:] if changed else None


def flag_ratios(timed: dict, flag: str) -> dict[str, float]:
    """Per draft with ``flag`` among its variants: the time without it / the time with it."""
    ratios = {}
    for (task, combo), ms in timed.items():
        base = tuple(v for v in combo if v != flag)
        if flag in combo and (task, base) in timed:
            ratios[f"{task} ({'+'.join(base)})"] = timed[(task, base)] / ms
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = arguments(__doc__.splitlines()[0], "every suite task with a conv")
    ap.add_argument("--warps8", action="store_true",
                    help="each implicit-GEMM draft also with the conv table's 128 x 64 tile on 8 warps")
    args = ap.parse_args(argv)
    tasks = [t for t in TASKS if not args.only or t.stem in args.only]
    t0 = time.perf_counter()
    rows = drafts(tasks, Path(tempfile.mkdtemp(prefix="conv-variants-")), warps8=args.warps8)
    records = verify_rows(rows, args.device, "conv-variants", lambda r: f"conv layout A/B: {r['conv']} on {r['task']}")
    if records and not args.no_record:
        record_evidence(ReasoningGraph(load_settings()), records)
    ratios = {}          # per task: implicit GEMM time / channels-last time, the other variants equal
    timed = {(r["task"], tuple(r["variants"])): r["kernel_ms"] for r in rows if r.get("kernel_ms")}
    for (task, combo), ms in timed.items():
        other = tuple("implicit_gemm" if v == "channels_last" else v for v in combo)
        if "channels_last" in combo and not {"split_weight", "warps8"} & set(combo) and (task, other) in timed:
            ratios[f"{task} ({'+'.join(combo)})"] = timed[(task, other)] / ms
    split_ratios, wide_ratios = flag_ratios(timed, "split_weight"), flag_ratios(timed, "warps8")
    report = {**report_head(args.device, t0, rows), "channels_last_speedup": ratios,
              "channels_last_speedup_geomean": statistics.geometric_mean(ratios.values()) if ratios else None,
              "split_weight_speedup": split_ratios,
              "split_weight_speedup_geomean": (statistics.geometric_mean(split_ratios.values())
                                               if split_ratios else None),
              "warps8_speedup": wide_ratios,
              "warps8_speedup_geomean": statistics.geometric_mean(wide_ratios.values()) if wide_ratios else None,
              "evidence_records": len(records)}
    write_report(report, args.out)
    print(f"channels-last / implicit GEMM, kernel time ratio (>1: channels-last faster): {ratios}")
    print(f"weight split / not, kernel time ratio (>1: split faster): {split_ratios}")
    if wide_ratios:
        print(f"8 warps / 4 on the 128 x 64 tile, kernel time ratio (>1: 8 faster): {wide_ratios}")
    print(f"wrote {args.out} ({report['wall_s']} s)")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
