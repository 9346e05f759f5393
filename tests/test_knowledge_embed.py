"""Embedding a query leaves the process as it found it: environment and torch threads."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import os, torch
torch.set_num_threads(2)
from kernelrag.knowledge.embed import embed, embed_query
vector = embed_query("how do I avoid shared memory bank conflicts")
assert len(vector) == 384
embed(["a batch", "of two"])
print(os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"), torch.get_num_threads())
"""


def test_embedding_a_query_changes_no_process_wide_state():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "None", "2"]


def test_the_numpy_query_encoder_agrees_with_sentence_transformers():
    import numpy as np

    from kernelrag.knowledge import embed

    assert embed.query_encoder() is not None                 # the bundled MiniLM qualifies
    for text in ("how do I avoid shared memory bank conflicts", "split-K " * 200):   # long: truncated alike
        fast = np.array(embed.embed_query(text))
        reference = np.array(embed._encode([text], None, 1, 1)[0])
        assert float(fast @ reference) > 0.99999 and np.abs(fast - reference).max() < 1e-4


SEARCH_PROBE = """
import sys
from kernelrag.cli import main
code = main(["search", "bank conflicts", "-k", "2"])
heavy = sorted(m for m in ("torch", "llama_index.core", "sentence_transformers", "transformers") if m in sys.modules)
print("HEAVY", code, ",".join(heavy) or "-")
"""


def test_search_imports_no_torch_and_no_llama_index(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELRAG_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    note = tmp_path / "n.md"
    note.write_text("# Banks\n\nPadding a shared-memory tile by one column removes bank conflicts.\n")
    ingest = subprocess.run([sys.executable, "-m", "kernelrag", "ingest", str(note), "--no-progress"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    done = subprocess.run([sys.executable, "-c", SEARCH_PROBE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "HEAVY 0 -"
