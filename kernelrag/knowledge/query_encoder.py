"""One query's embedding without torch: the sentence-transformers model's forward pass in numpy.

A search embeds one short sentence. Loading torch, transformers and
sentence-transformers for that costs seconds of start-up on a small machine, while
the forward pass of a 6-layer MiniLM over a few tokens is a millisecond of numpy.
This module runs exactly that pass for a BERT-architecture sentence-transformers
folder whose modules are Transformer -> mean Pooling -> Normalize (the bundled
all-MiniLM-L6-v2 is one): the fast tokenizer's own ``tokenizer.json`` (the same
tokenization as transformers' fast tokenizer), the weights from ``model.safetensors``,
float32 throughout. Vectors agree with sentence-transformers' to about 1e-6 (tested),
so queries embedded here meet chunks embedded there. Any other model folder returns
None from ``load`` and the caller uses sentence-transformers.

Imports numpy, tokenizers and safetensors only.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

_MODULES = ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize"]


def _erf(x):
    """Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7): BERT's exact GELU without scipy."""
    import numpy as np

    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x, weight, bias, eps: float):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / (var + eps) ** 0.5 * weight + bias


class QueryEncoder:
    """A loaded BERT sentence encoder: ``encode(text)`` -> normalised vector (list of floats)."""

    def __init__(self, folder: Path, config: dict[str, Any], max_length: int):
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.np = np
        self.w = {k: v.astype(np.float32) for k, v in load_file(str(folder / "model.safetensors")).items()
                  if not k.endswith("position_ids")}
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.prefix = "bert." if "bert.embeddings.word_embeddings.weight" in self.w else ""

    def _p(self, name: str):
        return self.w[self.prefix + name]

    def _dense(self, x, name: str):
        return x @ self._p(f"{name}.weight").T + self._p(f"{name}.bias")

    def encode(self, text: str) -> list[float]:
        np = self.np
        ids = self.tokenizer.encode(text).ids
        n = len(ids)
        x = (self._p("embeddings.word_embeddings.weight")[ids] + self._p("embeddings.position_embeddings.weight")[:n]
             + self._p("embeddings.token_type_embeddings.weight")[0])
        x = _layer_norm(x, self._p("embeddings.LayerNorm.weight"), self._p("embeddings.LayerNorm.bias"), self.eps)
        d = x.shape[1] // self.heads
        for i in range(self.layers):
            pre = f"encoder.layer.{i}"
            q, k, v = (self._dense(x, f"{pre}.attention.self.{m}").reshape(n, self.heads, d).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            ctx = (scores / scores.sum(-1, keepdims=True)) @ v
            ctx = ctx.transpose(1, 0, 2).reshape(n, -1)
            x = _layer_norm(self._dense(ctx, f"{pre}.attention.output.dense") + x,
                            self._p(f"{pre}.attention.output.LayerNorm.weight"),
                            self._p(f"{pre}.attention.output.LayerNorm.bias"), self.eps)
            h = self._dense(x, f"{pre}.intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = _layer_norm(self._dense(h, f"{pre}.output.dense") + x, self._p(f"{pre}.output.LayerNorm.weight"),
                            self._p(f"{pre}.output.LayerNorm.bias"), self.eps)
        pooled = x.mean(0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32).tolist()


def load(folder: Path) -> QueryEncoder | None:
    """The numpy encoder for ``folder``, or None when the folder is not a BERT encoder with
    mean pooling and normalisation (or a library it needs is missing)."""
    try:
        modules = [m.get("type") for m in json.loads((folder / "modules.json").read_text())]
        config = json.loads((folder / "config.json").read_text())
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        st_config = json.loads((folder / "sentence_bert_config.json").read_text())
    except (OSError, ValueError):
        return None
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                 "pooling_mode_mean_sqrt_len_tokens"))
    if (modules != _MODULES or config.get("model_type") != "bert" or not mean_only
            or config.get("position_embedding_type", "absolute") != "absolute"
            or config.get("hidden_act") != "gelu" or st_config.get("do_lower_case")
            or not (folder / "model.safetensors").is_file() or not (folder / "tokenizer.json").is_file()):
        return None
    try:
        return QueryEncoder(folder, config, int(st_config.get("max_seq_length", 256)))
    except ImportError:
        return None
