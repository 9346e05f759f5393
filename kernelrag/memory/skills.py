"""The skill library: verified kernels on disk, seed (shipped) and learned.

A skill is a folder ``<dir>/<pattern-slug>/<name>/`` with ``reference.py`` (the
task), ``kernel.py`` (ModelNew + its kernels), ``skill.toml`` (schema in the
project's contracts) and optional ``alternatives/*.py``. Seed skills live in
``settings.seed_skills_dir`` and are read-only here: approving or retiring one
writes an override record under ``settings.home``. Learned skills live in
``settings.learned_skills_dir`` and are edited in place.

Standard library only (tomllib + the small TOML writer): runs on the GPU machine.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from kernelrag.config import Settings, load_settings
from kernelrag.errors import SkillError
from kernelrag.memory.skill_status import REVIEW_STATES, SkillStatus, skill_status, stale_reason
from kernelrag.memory.storage import atomic_write_text, file_lock, load_vocabulary, now_utc
from kernelrag.memory.tomlwrite import dumps, update_table
from kernelrag.patterns import CATEGORIES, OpPattern, category_of, similarity, slug
from kernelrag.types import SkillRef

BACKENDS = ("triton", "cuda")
_STATE_RANK = {"approved": 0, "verified": 1, "draft": 2, "needs_review": 3, "retired": 4}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
OVERRIDES_FILE = "skill_overrides.json"


@dataclass
class Skill:
    name: str
    pattern: str
    category: str
    backend: str
    transformations: list[str]
    dtypes: list[str]
    shapes: dict[str, Any]
    tolerance: dict[str, Any]
    review_state: str
    provenance: dict[str, Any]
    path: Path
    source: str                      # "seed" | "learned"
    cpu_checkable: bool
    summary: str = ""
    file_state: str = ""             # review.state as written in skill.toml (before overrides)
    template: str = ""               # a template skill (skills/templates/): the lowering template it shows

    @property
    def toml_path(self) -> Path:
        return self.path / "skill.toml"

    @property
    def kernel_path(self) -> Path:
        return self.path / "kernel.py"

    @property
    def reference_path(self) -> Path:
        return self.path / "reference.py"

    def kernel_source(self) -> str:
        return self.kernel_path.read_text()

    def reference_source(self) -> str:
        return self.reference_path.read_text()

    def alternatives(self) -> list[Path]:
        alt = self.path / "alternatives"
        return sorted(alt.glob("*.py")) if alt.is_dir() else []

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["path"] = str(self.path)
        return out

    def to_ref(self, similarity: float = 0.0):
        return SkillRef(name=self.name, pattern=self.pattern, category=self.category, backend=self.backend,
                        state=self.review_state, summary=self.summary, path=str(self.path),
                        similarity=similarity, transformations=list(self.transformations),
                        speedup_vs_eager=self.provenance.get("speedup_vs_eager"), gpu=self.provenance.get("gpu"))


@dataclass
class SkillMatch:
    skill: Skill
    score: float


def alternative_transformations(path: Path) -> list[str]:
    """Transformation ids from an alternative's docstring first line ``transformations: a, b``."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    if not first.lower().startswith("transformations:"):
        raise SkillError(f"{path}: docstring must start with 'transformations: a, b' (ids from the vocabulary)")
    return [t.strip() for t in first.split(":", 1)[1].split(",") if t.strip()]


def parse_skill(folder: Path, source: str) -> Skill:
    """Read and check one skill folder; SkillError names the file and the field."""
    toml_path = folder / "skill.toml"
    try:
        data = tomllib.loads(toml_path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SkillError(f"{toml_path}: cannot read ({exc}); fix the file") from None

    def need(key: str, kind: type, choices: tuple | None = None) -> Any:
        val = data.get(key)
        if not isinstance(val, kind) or (kind is str and not val):
            raise SkillError(f"{toml_path}: '{key}' is missing or not a {kind.__name__} (got {val!r})")
        if choices and val not in choices:
            raise SkillError(f"{toml_path}: {key} = {val!r} is not one of {', '.join(choices)}")
        return val

    name = need("name", str)
    if name != folder.name:
        raise SkillError(f"{toml_path}: name = {name!r} must equal the folder name {folder.name!r}")
    state = (data.get("review") or {}).get("state", "draft")
    if state not in REVIEW_STATES:
        raise SkillError(f"{toml_path}: review.state = {state!r} is not one of {', '.join(REVIEW_STATES)}")
    for fname in ("reference.py", "kernel.py"):
        if not (folder / fname).is_file():
            raise SkillError(f"{folder}: {fname} is missing; a skill needs reference.py, kernel.py and skill.toml")
    backend = need("backend", str, BACKENDS)
    trans = data.get("transformations", [])
    if not isinstance(trans, list) or not all(isinstance(t, str) for t in trans):
        raise SkillError(f"{toml_path}: 'transformations' must be a list of ids")
    return Skill(
        name=name, pattern=need("pattern", str), category=need("category", str, CATEGORIES),
        backend=backend, transformations=list(trans), dtypes=list(data.get("dtypes", ["float32"])),
        shapes=dict(data.get("shapes", {})), tolerance=dict(data.get("tolerance", {})),
        review_state=state, provenance=dict(data.get("provenance", {})), path=folder, source=source,
        cpu_checkable=bool(data.get("cpu_checkable", backend == "triton")),
        summary=str(data.get("summary", "")), file_state=state,
        template=str((data.get("template") or {}).get("name", "")) if isinstance(data.get("template"), dict) else "")


@functools.lru_cache(maxsize=1)
def current_environment() -> dict[str, str | None]:
    """torch / triton versions installed here and the GPU name (None without a GPU)."""
    env: dict[str, str | None] = {}
    for pkg in ("torch", "triton"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    gpu = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    elif shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            gpu = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            gpu = None
    env["gpu"] = gpu
    return env


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", text.lower()) if len(t) > 1}


class SkillLibrary:
    """Seed and learned skills; finding, staleness, write-back, review."""

    def __init__(self, settings: "Settings | None" = None, *, seed_dir: "str | Path | None" = None,
                 learned_dir: "str | Path | None" = None):
        if settings is None:
            settings = load_settings()
        self.settings = settings
        self.seed_dir = Path(seed_dir) if seed_dir is not None else Path(settings.seed_skills_dir)
        self.learned_dir = Path(learned_dir) if learned_dir is not None else Path(settings.learned_skills_dir)
        self.overrides_path = Path(settings.home) / OVERRIDES_FILE
        self._problems: list[str] = []
        self._skills: dict[str, Skill] | None = None

    @property
    def problems(self) -> list[str]:
        """Skill folders that could not be loaded, or look wrong, each with the fix."""
        self._scan()
        return list(self._problems)

    # ------------------------------------------------------------------ loading
    def _scan(self) -> dict[str, Skill]:
        if self._skills is not None:
            return self._skills
        self._problems = []
        skills: dict[str, Skill] = {}
        overrides = self._overrides()
        vocab = load_vocabulary()
        for source, root in (("seed", self.seed_dir), ("learned", self.learned_dir)):
            if not root.is_dir():
                continue
            for toml_path in sorted(root.glob("*/*/skill.toml")):
                if toml_path.parent.name.startswith("."):      # a write in progress, or its leftovers
                    continue
                try:
                    skill = parse_skill(toml_path.parent, source)
                except SkillError as exc:
                    self._problems.append(str(exc))
                    continue
                if skill.name in skills:
                    self._problems.append(f"{toml_path.parent}: skill name {skill.name!r} already used by "
                                         f"{skills[skill.name].path}; rename one of them")
                    continue
                expected = "templates" if skill.template else slug(skill.pattern)   # template skills: one folder
                if skill.path.parent.name != expected:
                    self._problems.append(f"{skill.path}: folder {skill.path.parent.name!r} should be "
                                         f"{expected!r} (the slug of pattern {skill.pattern!r}, or templates "
                                         "for a skill with a [template] table)")
                bad = [t for t in skill.transformations if t not in vocab]
                if bad:
                    self._problems.append(f"{skill.toml_path}: unknown transformation ids {bad}")
                ov = overrides.get(skill.name)
                if source == "seed" and ov and ov.get("base_state") == skill.file_state:
                    skill.review_state = ov["state"]
                skills[skill.name] = skill
        self._skills = skills
        return skills

    def refresh(self) -> None:
        self._skills = None

    def list(self, include_retired: bool = True, source: str | None = None) -> list[Skill]:
        return [s for _, s in sorted(self._scan().items())
                if (include_retired or s.review_state != "retired") and (source is None or s.source == source)]

    def get(self, name: str) -> Skill:
        skills = self._scan()
        if name in skills:
            return skills[name]
        close = difflib.get_close_matches(name, list(skills), n=5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known skills: {', '.join(sorted(skills)) or 'none'}"
        raise SkillError(f"no skill named {name!r}{hint}", usage=True)

    def find(self, pattern: "str | OpPattern | None" = None, text: str | None = None,
             category: str | None = None, k: int = 5, include_retired: bool = False) -> list[SkillMatch]:
        """Skills ranked by pattern similarity (and word overlap with ``text``)."""
        words = _tokens(text or "")
        out = []
        for skill in self.list(include_retired=include_retired):
            if category and skill.category != category:
                continue
            parts = []
            if pattern is not None:
                parts.append((0.7 if words else 1.0, similarity(pattern, skill.pattern)))
            if words:
                hay = _tokens(" ".join([skill.name, skill.pattern, skill.summary, skill.category,
                                        *skill.transformations]))
                parts.append((0.3 if pattern is not None else 1.0, len(words & hay) / len(words)))
            score = sum(w * s for w, s in parts) if parts else 1.0
            if score > 0:
                out.append(SkillMatch(skill, round(score, 4)))
        out.sort(key=lambda m: (-m.score, _STATE_RANK.get(m.skill.review_state, 9), m.skill.name))
        return out[:k]

    # ------------------------------------------------------------------ staleness
    def is_stale(self, skill: Skill, env: dict[str, str | None] | None = None) -> str | None:
        """Why the skill's measurement does not hold here, or None when it does
        (rules and vocabulary: ``kernelrag.memory.skill_status``)."""
        return stale_reason(skill.provenance, current_environment() if env is None else env)

    def status(self, skill: Skill, env: dict[str, str | None] | None = None) -> SkillStatus:
        """State, evidence and freshness of ``skill``, as every interface shows them."""
        return skill_status(skill.review_state, skill.provenance, current_environment() if env is None else env)

    # ------------------------------------------------------------------ writing
    def write_learned(self, name: str, pattern: "str | OpPattern", kernel_src: str, reference_src: str,
                      meta: dict[str, Any] | None = None, overwrite: bool = False) -> Skill:
        """Write a learned skill folder atomically and return it.

        ``meta`` holds the skill.toml fields: category, backend, transformations,
        dtypes, summary, shapes, tolerance, review ({"state": ...}) or review_state,
        provenance (from a real verifier run), cpu_checkable.
        """
        meta = dict(meta or {})
        if not _NAME.match(name):
            raise SkillError(f"skill name {name!r} must be lower-case letters, digits, '_' or '-'", usage=True)
        existing = self._scan().get(name)
        if existing is not None and existing.source == "seed":
            raise SkillError(f"{name!r} is a seed skill ({existing.path}); choose another name", usage=True)
        sig = pattern.signature if isinstance(pattern, OpPattern) else str(pattern)
        vocab = load_vocabulary()
        bad = [t for t in meta.get("transformations", []) if t not in vocab]
        if bad:
            raise SkillError(f"unknown transformation ids {bad}; valid ids: {', '.join(sorted(vocab))}", usage=True)
        review = dict(meta.pop("review", {}) or {})
        review["state"] = meta.pop("review_state", review.get("state", "draft"))
        data = {"name": name, "pattern": sig, "category": meta.pop("category", category_of(sig)),
                "backend": meta.pop("backend", "triton"), "transformations": list(meta.pop("transformations", [])),
                "dtypes": list(meta.pop("dtypes", ["float32"])), "summary": meta.pop("summary", ""),
                **{k: v for k, v in meta.items() if not isinstance(v, dict)},
                "shapes": meta.get("shapes", {}), "tolerance": meta.get("tolerance") or None,
                "review": review, "provenance": meta.get("provenance") or None}
        folder = self.learned_dir / slug(sig) / name

        with file_lock(self.learned_dir / f".{name}"):     # one writer per skill name, across processes
            self.refresh()
            existing = self._scan().get(name)
            if (folder.exists() or existing is not None) and not overwrite:
                raise SkillError(f"learned skill {name!r} exists at {folder}; pass overwrite=True to replace it",
                                 usage=True)
            try:
                self._swap_in(folder, name, {"kernel.py": kernel_src, "reference.py": reference_src,
                                             "skill.toml": dumps(data)})
            except OSError as exc:
                raise SkillError(f"cannot write learned skill {name!r} under {self.learned_dir} "
                                 f"({exc.strerror or exc}); KERNELRAG_HOME must be writable") from None
            if existing is not None and existing.path != folder:
                shutil.rmtree(existing.path, ignore_errors=True)
            self.refresh()
            return self.get(name)           # under the lock: another writer is not half-way through

    @staticmethod
    def _swap_in(folder: Path, name: str, files: dict[str, str]) -> None:
        """Write ``files`` into a temp folder beside ``folder``, then put it in ``folder``'s place.
        The caller holds the skill's lock; nothing is left behind when a step fails."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))
        old = folder.with_name(f".{name}.old-{os.getpid()}")
        try:
            for fname, text in files.items():
                (tmp / fname).write_text(text)
            if folder.exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(folder, old)
            os.replace(tmp, folder)
        except BaseException:
            if old.exists() and not folder.exists():
                os.replace(old, folder)            # the previous version stays in place
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)

    def record_measurement(self, name: str, provenance: dict[str, Any] | None, state: str,
                           reasons: list[str] | None = None) -> Skill:
        """Write measured numbers into skill.toml [provenance] and set review.state.

        Used by the measurement script (seed skills) and after verifying a learned
        skill; provenance comes only from a real verifier run."""
        if state not in REVIEW_STATES:
            raise SkillError(f"state {state!r} is not one of {', '.join(REVIEW_STATES)}", usage=True)
        skill = self.get(name)
        text = skill.toml_path.read_text()
        if provenance is not None:
            text = update_table(text, "provenance", provenance, replace=True)
        text = update_table(text, "review", {"state": state, "reasons": list(reasons or [])})
        atomic_write_text(skill.toml_path, text)
        self.refresh()
        return self.get(name)

    def _overrides(self) -> dict[str, Any]:
        if not self.overrides_path.is_file():
            return {}
        try:
            return json.loads(self.overrides_path.read_text())
        except ValueError as exc:
            raise SkillError(f"{self.overrides_path} is not valid JSON ({exc}); fix or delete it") from None

    def _set_state(self, name: str, state: str) -> Skill:
        skill = self.get(name)
        if skill.source == "learned":
            return self.record_measurement(name, None, state)
        with file_lock(self.overrides_path):
            data = self._overrides()
            data[name] = {"state": state, "base_state": skill.file_state, "date": now_utc()}
            atomic_write_text(self.overrides_path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        self.refresh()
        return self.get(name)

    def approve(self, name: str) -> Skill:
        """Mark a measured skill approved by a person (verified / needs_review -> approved)."""
        skill = self.get(name)
        if skill.review_state not in ("verified", "needs_review", "approved"):
            raise SkillError(f"skill {name!r} is {skill.review_state}; only a verified skill can be approved "
                             f"(run: kernelrag skills verify {name})", usage=True)
        return self._set_state(name, "approved")

    def retire(self, name: str) -> Skill:
        """Stop offering the skill (it stays on disk)."""
        return self._set_state(name, "retired")

    def promote(self, name: str, dest: "str | Path | None" = None) -> Path:
        """Copy a verified or approved learned skill into the seed tree; returns its new folder."""
        skill = self.get(name)
        if skill.source != "learned":
            raise SkillError(f"{name!r} is already a seed skill ({skill.path})", usage=True)
        if skill.review_state not in ("verified", "approved"):
            raise SkillError(f"skill {name!r} is {skill.review_state}; only verified or approved skills "
                             f"can be promoted (run: kernelrag skills verify {name})", usage=True)
        root = Path(dest) if dest is not None else self.seed_dir
        target = root / slug(skill.pattern) / name
        if target.exists():
            raise SkillError(f"{target} already exists; retire or remove it first", usage=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(skill.path, target, ignore=shutil.ignore_patterns("__pycache__"))
        if root.resolve() == self.seed_dir.resolve():
            shutil.rmtree(skill.path)          # now a seed skill; one name, one folder
        self.refresh()
        return target
