"""Settings: one typed object, read in one place.

Precedence, lowest first: defaults < ``kernelrag.toml`` < ``KERNELRAG_*``
environment < explicit keyword arguments. The config file is looked up at
``$KERNELRAG_CONFIG``, else ``./kernelrag.toml``, else ``$KERNELRAG_HOME/kernelrag.toml``.
``KERNELRAG_HOME`` holds all state, so tests point it at a temp dir.

Standard library only: this module runs on the GPU machine too.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kernelrag.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    # --- state --------------------------------------------------------------
    home: Path = field(default_factory=lambda: Path.home() / ".kernelrag")
    # --- knowledge store ----------------------------------------------------
    chroma_url: str | None = None          # http://host:port selects a Chroma server
    collection: str = "kernelrag"
    embed_model: str | None = None         # a local sentence-transformers dir; None = bundled MiniLM
    embed_batch_size: int = 64
    max_file_bytes: int = 20_000_000       # larger files are refused at ingest, with a reason
    chunk_chars: int = 1800                # target chunk size; code blocks are never split
    search_k: int = 5
    # --- skills -------------------------------------------------------------
    seed_skills_dir: Path = REPO_ROOT / "skills"   # shipped, read-only seed memory
    # --- LLM ----------------------------------------------------------------
    llm_base_url: str | None = None        # any OpenAI-compatible endpoint; None = offline
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str | None = field(default=None, repr=False)
    llm_timeout_s: float = 120.0
    llm_max_retries: int = 2
    llm_temperature: float = 0.2
    # --- verification -------------------------------------------------------
    device: str = "auto"                   # auto | cpu | cuda
    verify_timeout_s: float = 300.0
    profile: bool = False                  # on a GPU, profile verified kernels once with ncu
    max_rounds: int = 4
    require_isolation: bool | None = None  # refuse to run candidates without an OS sandbox;
                                           # None: on whenever the drafter is an LLM
    verify_isolation: str = "auto"         # auto | unshare | direct | none; the verifier reads it from
                                           # $KERNELRAG_VERIFY_ISOLATION (its workers inherit it)

    # derived paths ----------------------------------------------------------
    @property
    def chroma_dir(self) -> Path:
        return self.home / "chroma"

    @property
    def graph_path(self) -> Path:
        return self.home / "graph.json"

    @property
    def learned_skills_dir(self) -> Path:
        return self.home / "skills"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def llm_enabled(self) -> bool:
        return bool(self.llm_base_url)

    def public_dict(self) -> dict[str, Any]:
        """Settings as plain data, with the API key masked (never echo a key)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "llm_api_key":
                value = "***" if value else None
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out


_FIELDS = {f.name: f for f in fields(Settings)}
_ENV_PREFIX = "KERNELRAG_"
_TRUE = {"1", "true", "yes", "on"}


def _coerce(name: str, value: Any, source: str) -> Any:
    """Convert a raw value to the field's type, or say exactly what is wrong."""
    f = _FIELDS[name]
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if value is None:
            return None
        if "Path" in kind:
            return Path(value).expanduser()
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("bool"):
            return value if isinstance(value, bool) else str(value).lower() in _TRUE
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"setting {name!r} from {source} has bad value {value!r} ({exc}); expected {kind}"
        ) from None


def _check_name(name: str, source: str) -> None:
    if name not in _FIELDS:
        valid = ", ".join(sorted(_FIELDS))
        raise ConfigError(f"unknown setting {name!r} in {source}; valid settings: {valid}")


def _config_file(home: Path | None) -> Path | None:
    explicit = os.environ.get("KERNELRAG_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"KERNELRAG_CONFIG={explicit!r} does not exist; unset it or create the file")
        return path
    for candidate in (Path.cwd() / "kernelrag.toml", (home / "kernelrag.toml") if home else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def load_settings(**overrides: Any) -> Settings:
    """Build the settings: defaults < kernelrag.toml < KERNELRAG_* env < ``overrides``.

    Explicit overrides whose value is None are ignored, so CLI flags that were not
    given fall through to the lower layers.
    """
    values: dict[str, Any] = {}
    env = {k[len(_ENV_PREFIX):].lower(): v for k, v in os.environ.items() if k.startswith(_ENV_PREFIX)}
    env.pop("config", None)
    home_hint = overrides.get("home") or env.get("home")
    path = _config_file(Path(home_hint).expanduser() if home_hint else None)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}; fix or remove it") from None
        data = data.get("kernelrag", data)
        for name, value in data.items():
            _check_name(name, str(path))
            values[name] = _coerce(name, value, str(path))
    for name, value in env.items():
        _check_name(name, f"environment variable {_ENV_PREFIX}{name.upper()}")
        values[name] = _coerce(name, value, f"${_ENV_PREFIX}{name.upper()}")
    if "llm_api_key" not in values and os.environ.get("OPENAI_API_KEY"):
        values["llm_api_key"] = os.environ["OPENAI_API_KEY"]
    for name, value in overrides.items():
        if value is None:
            continue
        _check_name(name, "arguments")
        values[name] = _coerce(name, value, "arguments")
    settings = Settings(**values)
    if settings.device not in {"auto", "cpu", "cuda"}:
        raise ConfigError(f"device={settings.device!r} is not one of auto, cpu, cuda")
    if settings.verify_isolation not in {"auto", "unshare", "direct", "none"}:
        raise ConfigError(f"verify_isolation={settings.verify_isolation!r} is not one of auto, unshare, direct, none")
    return settings


def replace(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with some fields changed (validated like overrides)."""
    for name in changes:
        _check_name(name, "arguments")
    return dataclasses.replace(settings, **{k: _coerce(k, v, "arguments") for k, v in changes.items()})
