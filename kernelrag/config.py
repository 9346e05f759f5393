"""Settings: one typed object, read in one place.

Precedence, lowest first: defaults < ``kernelrag.toml`` < ``KERNELRAG_*``
environment < explicit keyword arguments. The config file is looked up at
``$KERNELRAG_CONFIG``, else ``./kernelrag.toml``, else ``$KERNELRAG_HOME/kernelrag.toml``.
``KERNELRAG_HOME`` holds all state, so tests point it at a temp dir.

``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` stand in for ``llm_base_url`` and
``llm_api_key`` when neither the config file nor ``KERNELRAG_LLM_*`` sets them.
Besides the settings, ``KERNELRAG_CONFIG`` and the verifier's own switches
(``PROCESS_VARIABLES``) may be set; any other ``KERNELRAG_*`` variable is an error.

Numbers are range-checked (``RANGES``); a bad value is blamed on the setting and
the place it came from. Credentials in a URL (``http://user:pass@host``) and the
API key are secrets: ``Settings.scrub`` removes them from any text.

Standard library only: this module runs on the GPU machine too.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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
    lock_timeout_s: float = 60.0           # how long ingest waits for another ingest of the same store
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
    input_roots: str | None = None         # folders (os.pathsep-separated) MCP and the UI may read; None = cwd
    verify_timeout_s: float = 300.0
    profile: bool = False                  # on a GPU, profile verified kernels once with ncu
    max_rounds: int = 4
    tune_top_k: int = 4                    # on a GPU, configurations of a verified tunable kernel timed
                                           # by the verifier (the graph's best first); 0: no config search
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

    @property
    def llm_url_shown(self) -> str | None:
        """``llm_base_url`` without the credentials it may carry (safe to print)."""
        return redact_url(self.llm_base_url)

    def secrets(self) -> list[str]:
        """Every secret these settings hold: the API key and credentials inside URLs."""
        out = [self.llm_api_key] if self.llm_api_key else []
        for url in (self.llm_base_url, self.chroma_url):
            out += url_credentials(url)
        return sorted({s for s in out if s}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***`` (see ``secrets``)."""
        return scrub(text, self.secrets())

    def public_dict(self) -> dict[str, Any]:
        """Settings as plain data, with the API key masked and URLs shown without credentials."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "llm_api_key":
                value = "***" if value else None
            elif f.name in ("llm_base_url", "chroma_url"):
                value = redact_url(value)
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out


def url_credentials(url: str | None) -> list[str]:
    """The ``user:password`` part of a URL, and the password alone (empty when none)."""
    if not url or "@" not in url:
        return []
    netloc = urlsplit(url if "://" in url else f"http://{url}").netloc
    userinfo = netloc.rpartition("@")[0]
    if not userinfo:
        return []
    password = userinfo.partition(":")[2]
    return [userinfo] + ([password] if len(password) >= 3 else [])


def redact_url(url: str | None) -> str | None:
    """``http://user:pass@host/v1`` -> ``http://***@host/v1``; other URLs unchanged."""
    if not url or "@" not in url:
        return url
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


_FIELDS = {f.name: f for f in fields(Settings)}
_ENV_PREFIX = "KERNELRAG_"
# KERNELRAG_* variables that are not settings: the config file's path, and the switches
# the verifier reads itself (kernelrag/verify/sandbox.py, processes.py, isolation.py)
PROCESS_VARIABLES = {"KERNELRAG_CONFIG": "the config file to read",
                     "KERNELRAG_VERIFY_KEEP": "keep the verifier's scratch folders for inspection",
                     "KERNELRAG_VERIFY_NO_ZYGOTE": "start every CPU candidate process from scratch",
                     "KERNELRAG_VERIFY_ISOLATION": "the verifier's sandbox (auto, unshare, direct, none)"}
# numeric settings: (lowest, highest, lowest allowed itself); None = unbounded
RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "embed_batch_size": (1, 4096, True),
    "max_file_bytes": (1, None, True),
    "chunk_chars": (200, 100_000, True),
    "search_k": (1, 100, True),
    "lock_timeout_s": (0, 86_400, True),
    "llm_timeout_s": (0, 3600, False),
    "llm_max_retries": (0, 10, True),
    "llm_temperature": (0, 2, True),
    "verify_timeout_s": (0, 86_400, False),
    "max_rounds": (1, 50, True),
    "tune_top_k": (0, 64, True),
}


def range_text(name: str) -> str:
    low, high, inclusive = RANGES[name]
    lower = f"{'>=' if inclusive else '>'} {low:g}"
    return f"{lower} and <= {high:g}" if high is not None else lower


def _check_range(name: str, value: Any, source: str) -> None:
    if name not in RANGES or value is None:
        return
    low, high, inclusive = RANGES[name]
    if (value < low if inclusive else value <= low) or (high is not None and value > high) or value != value:
        raise ConfigError(f"setting {name!r} from {source} is {value!r}, out of range; "
                          f"valid range: {range_text(name)}")
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
        extra = ""
        if source.startswith("environment"):
            extra = "; other KERNELRAG_* variables understood: " + ", ".join(sorted(PROCESS_VARIABLES))
        raise ConfigError(f"unknown setting {name!r} in {source}; valid settings: {valid}{extra}")


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
    sources: dict[str, str] = {}
    env = {k[len(_ENV_PREFIX):].lower(): v for k, v in os.environ.items()
           if k.startswith(_ENV_PREFIX) and k not in PROCESS_VARIABLES}
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
            sources[name] = str(path)
    for name, value in env.items():
        _check_name(name, f"environment variable {_ENV_PREFIX}{name.upper()}")
        values[name] = _coerce(name, value, f"${_ENV_PREFIX}{name.upper()}")
        sources[name] = f"${_ENV_PREFIX}{name.upper()}"
    for name, fallback in (("llm_base_url", "OPENAI_BASE_URL"), ("llm_api_key", "OPENAI_API_KEY")):
        if name not in values and os.environ.get(fallback):
            values[name], sources[name] = os.environ[fallback], f"${fallback}"
    for name, value in overrides.items():
        if value is None:
            continue
        _check_name(name, "arguments")
        values[name] = _coerce(name, value, "arguments")
        sources[name] = "arguments"
    for name, value in values.items():
        _check_range(name, value, sources.get(name, "arguments"))
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
    values = {k: _coerce(k, v, "arguments") for k, v in changes.items()}
    for name, value in values.items():
        _check_range(name, value, "arguments")
    return dataclasses.replace(settings, **values)


# --- inputs from MCP clients and the UI ----------------------------------------------
MAX_SOURCE_BYTES = 1_048_576      # a task or kernel source, or a file given by path
MAX_NAME_CHARS = 200              # skill names, pattern names, GPU names, dtypes


def input_roots(settings: Settings) -> list[Path]:
    """The folders MCP clients and the UI may name files in (``input_roots``, else the cwd)."""
    text = settings.input_roots
    parts = [p for p in (text.split(os.pathsep) if text else []) if p.strip()]
    return [Path(p).expanduser().resolve() for p in parts] or [Path.cwd().resolve()]


def check_size(what: str, text: str, limit: int = MAX_SOURCE_BYTES) -> str:
    """``text`` when it is at most ``limit`` bytes (UTF-8), else a usage error naming the limit."""
    size = len(text.encode("utf-8", "replace"))
    if size > limit:
        raise ConfigError(f"{what} is {size} bytes; the limit is {limit} bytes ({limit / 1_048_576:g} MB)")
    return text


def read_input(value: str, settings: Settings, what: str) -> tuple[str, Path | None]:
    """(source, path or None) of an MCP or UI argument that is source text or a file path.

    Source text (it has a newline or a ``class``) is taken as it is, up to
    ``MAX_SOURCE_BYTES``. A path must name a regular file under ``input_roots``
    (symlinks resolved first); nothing of a file outside them is read or echoed."""
    text = check_size(what, value or "")
    if "\n" in text or "class " in text:
        return text, None
    if not text.strip():
        raise ConfigError(f"{what} is empty; give the Python source or a file path")
    path = Path(text.strip()).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ConfigError(f"{what} path {text.strip()!r} does not exist; give the Python source itself, "
                          "or a file path under the allowed folders") from None
    roots = input_roots(settings)
    if not any(real == r or real.is_relative_to(r) for r in roots):
        raise ConfigError(f"{what} path {text.strip()!r} is outside the folders this server reads "
                          f"({os.pathsep.join(map(str, roots))}); pass the source text instead, or add the "
                          "folder to KERNELRAG_INPUT_ROOTS")
    if not real.is_file():
        raise ConfigError(f"{what} path {text.strip()!r} is not a regular file")
    if real.stat().st_size > MAX_SOURCE_BYTES:
        raise ConfigError(f"{what} file {text.strip()!r} is {real.stat().st_size} bytes; the limit is "
                          f"{MAX_SOURCE_BYTES} bytes (1 MB)")
    try:
        return real.read_text(), real
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} file {text.strip()!r} cannot be read as text "
                          f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
