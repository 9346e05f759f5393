"""The lowering's templates as skills: ``skills/templates/<name>/``, one per template variant.

Each folder is a seed skill like the others (``reference.py``, ``kernel.py``, ``skill.toml``),
so the CPU verifier checks it, the memory indexes it and an LLM drafter is shown it.
``kernel.py`` is what the template emits for ``reference.py``, under a docstring written
to teach: the technique, the bytes and FLOPs of the instance, and why the fusion points
sit where they do. ``skill.toml`` names the template and variant in its ``[template]``
table.

The kernels are not edited by hand: ``render`` lowers the reference again and keeps the
hand-written docstring, so a change to a template shows up as a difference here, and the
tests fail until the skill is re-rendered:

    python -m kernelrag.draft.lower.template_skills           # list what is out of date
    python -m kernelrag.draft.lower.template_skills --write   # re-render
"""
from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from pathlib import Path

from kernelrag.config import REPO_ROOT

ROOT = REPO_ROOT / "skills" / "templates"
SECTIONS = ("Technique", "Bytes and FLOPs", "Fusion points")


def folders(root: Path = ROOT) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/skill.toml"))


def template_of(folder: Path) -> tuple[str, tuple[str, ...]]:
    """(template name, the variants to lower with) from ``skill.toml``'s ``[template]``."""
    table = tomllib.loads((folder / "skill.toml").read_text()).get("template") or {}
    name, variants = table.get("name"), table.get("variants")
    if not isinstance(name, str) or not isinstance(variants, list) or not variants:
        raise ValueError(f"{folder / 'skill.toml'}: needs [template] name = \"...\" and variants = [\"...\"]")
    return name, tuple(str(v) for v in variants)


def _split_docstring(source: str) -> tuple[str, str]:
    """(the module docstring's text, the code after it)."""
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)):
        return "", source
    lines = source.splitlines(keepends=True)
    return first.value.value, "".join(lines[first.end_lineno:])


def render(folder: Path) -> str:
    """``kernel.py`` as it should read: the kept docstring over what the template emits now."""
    from kernelrag.draft.lower.lowering import lower

    _, variants = template_of(folder)
    drafted = lower((folder / "reference.py").read_text(), folder.name, variants)
    if not drafted.ok:
        raise ValueError(f"{folder}: the template no longer lowers its reference: {drafted.reason}")
    kernel = folder / "kernel.py"
    doc = _split_docstring(kernel.read_text())[0] if kernel.exists() else ""
    _, body = _split_docstring(drafted.source)
    return f'"""{doc}"""\n' + body


def problems(folder: Path) -> list[str]:
    """What is wrong with one template skill: a stale kernel, a docstring missing a section."""
    out = []
    kernel = (folder / "kernel.py").read_text()
    doc = _split_docstring(kernel)[0]
    out += [f"{folder.name}: the docstring has no '{s}' section" for s in SECTIONS if f"{s}:" not in doc]
    if render(folder) != kernel:
        out.append(f"{folder.name}: kernel.py differs from what the template emits now; re-render with --write")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="re-render every kernel.py in place")
    args = parser.parse_args(argv)
    bad = 0
    for folder in folders():
        if args.write:
            (folder / "kernel.py").write_text(render(folder))
        found = problems(folder)
        bad += len(found)
        print("\n".join(found) if found else f"{folder.name}: in sync")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
