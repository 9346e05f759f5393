"""The lowering's templates as skill files (skills/templates/): each teaches its technique, byte
and FLOP counts and fusion points, and holds exactly what its template emits today. The CPU
verification of each runs with the other seed skills (test_seed_skills)."""
from __future__ import annotations

import pytest

from kernelrag.draft.lower import template_skills as ts

FOLDERS = ts.folders()


def test_every_template_and_variant_has_a_skill():
    covered = {(ts.template_of(f)[0], v) for f in FOLDERS for v in ts.template_of(f)[1]}
    from kernelrag.draft.lower.families import templates

    for template in templates():
        if template.name == "gemm":   # the fp32 path; bf16x6, ieee and tensor_cores share its tile code, and
            assert ("gemm", "tf32x3") in covered    # the interpreter cannot judge a bf16 tl.dot
            continue
        for variant in template.variants:
            assert (template.name, variant) in covered, f"no skill teaches {template.name} ({variant})"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_a_template_skill_teaches_and_matches_its_template(folder):
    assert ts.problems(folder) == []


def test_a_stale_kernel_is_reported(tmp_path):
    import shutil

    folder = tmp_path / FOLDERS[0].name
    shutil.copytree(FOLDERS[0], folder)
    (folder / "kernel.py").write_text((folder / "kernel.py").read_text().replace("tl.store", "tl.store ", 1))
    assert any("differs from what the template emits" in p for p in ts.problems(folder))
    doc = '"""Technique: only this."""\n'
    (folder / "kernel.py").write_text(doc)
    assert {"Bytes and FLOPs", "Fusion points"} <= {p.split("'")[1] for p in ts.problems(folder) if "section" in p}


def test_the_offline_drafter_lowers_a_template_skills_task_instead_of_replaying_it():
    """A template skill teaches (retrieval, an LLM's prompt); for a task the lowering drafts the
    kernel itself, with the task's own parameters and the variant the graph ranks first."""
    from kernelrag.config import load_settings
    from kernelrag.draft.offline import OfflineDrafter
    from kernelrag.memory.skills import SkillLibrary
    from kernelrag.patterns.trace import op_pattern

    library = SkillLibrary(load_settings())
    names = {s.name for s in library.list(include_retired=False) if s.template}
    assert names == {f.name for f in FOLDERS}
    for folder in FOLDERS:
        ref = folder / "reference.py"
        plans, _ = OfflineDrafter(library).plan(ref.read_text(), op_pattern(ref), device="cpu")
        assert not {p.key for p in plans if p.kind == "skill"} & names, folder.name
        assert any(p.kind == "lowering" for p in plans), folder.name


def test_the_library_loads_the_template_skills_without_problems():
    from kernelrag.config import load_settings
    from kernelrag.memory.skills import SkillLibrary

    library = SkillLibrary(load_settings())
    library.list()
    assert not [p for p in library.problems if "/templates/" in p], library.problems
