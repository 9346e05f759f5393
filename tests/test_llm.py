"""The LLM client against a real local OpenAI-compatible server, and code extraction."""
from __future__ import annotations

import json
import logging

import pytest

from kernelrag.config import load_settings
from kernelrag.errors import LLMError
from kernelrag.draft.llm import LLMClient, extract_code
from llm_server import FIXTURES, CannedLLM

KEY = "sk-test-0123456789abcdef-never-echo"


def settings_for(server: CannedLLM, **extra):
    return load_settings(llm_base_url=server.url, llm_api_key=KEY, llm_model="canned-model", **extra)


def test_chat_returns_the_canned_answer_and_usage():
    with CannedLLM(["relu_affine_good.md"]) as server:
        client = LLMClient(settings_for(server))
        done = client.chat([{"role": "user", "content": "write the kernel please"}])
    assert done.text == (FIXTURES / "relu_affine_good.md").read_text()
    assert done.prompt_tokens == 4 and done.completion_tokens > 50
    body = server.chat_requests[0]["body"]
    assert body["model"] == "canned-model"
    assert body["messages"][0]["content"] == "write the kernel please"
    auth = {k.lower(): v for k, v in server.chat_requests[0]["headers"].items()}["authorization"]
    assert auth == f"Bearer {KEY}"     # the key goes to the endpoint, and nowhere else


def test_stream_yields_pieces_that_join_to_the_answer():
    with CannedLLM(["ask_answer.md"], chunk_chars=7) as server:
        client = LLMClient(settings_for(server))
        pieces = list(client.stream([{"role": "user", "content": "bank conflicts?"}]))
    assert len(pieces) > 5
    assert "".join(pieces) == (FIXTURES / "ask_answer.md").read_text()
    assert client.last_usage[1] > 0
    assert server.chat_requests[0]["body"]["stream"] is True


def test_retries_a_failing_endpoint_then_succeeds(caplog):
    with CannedLLM(["ask_answer.md"], fail_first=2) as server:
        client = LLMClient(settings_for(server, llm_max_retries=2))
        with caplog.at_level(logging.DEBUG):
            done = client.chat([{"role": "user", "content": "q"}])
    assert "bank" in done.text
    assert len(server.chat_requests) == 3
    assert KEY not in caplog.text


def test_gives_up_after_retries_with_an_error_that_names_the_endpoint():
    with CannedLLM([], fail_first=10) as server:
        client = LLMClient(settings_for(server, llm_max_retries=1))
        with pytest.raises(LLMError) as info:
            client.chat([{"role": "user", "content": "q"}])
    assert server.url in str(info.value) and "2 time(s)" in str(info.value)
    assert KEY not in str(info.value)
    assert len(server.chat_requests) == 2


def test_timeout_becomes_an_llm_error():
    with CannedLLM(["ask_answer.md"], delay_s=2.0) as server:
        client = LLMClient(settings_for(server, llm_timeout_s=0.3, llm_max_retries=0))
        with pytest.raises(LLMError) as info:
            client.chat([{"role": "user", "content": "q"}])
    assert "Timeout" in str(info.value) and "llm_timeout_s" in str(info.value)


def test_no_endpoint_configured_says_how_to_configure_one():
    with pytest.raises(LLMError, match="KERNELRAG_LLM_BASE_URL"):
        LLMClient(load_settings())


def test_key_never_appears_in_logs_or_settings_dump(caplog):
    with CannedLLM(["relu_affine_good.md"]) as server:
        settings = settings_for(server)
        with caplog.at_level(logging.DEBUG):
            LLMClient(settings).chat([{"role": "user", "content": "q"}])
    assert KEY not in caplog.text
    assert KEY not in json.dumps(settings.public_dict())
    assert KEY not in repr(settings)


# --- code extraction ----------------------------------------------------------------
def test_extract_code_takes_the_block_defining_modelnew():
    code = extract_code((FIXTURES / "relu_affine_good.md").read_text())
    assert code.lstrip().startswith('"""transformations: elementwise_fusion"""')
    assert "class ModelNew(nn.Module)" in code and "```" not in code


def test_extract_code_prefers_the_last_block_that_defines_the_class():
    answer = ("Here is a helper:\n```python\nimport torch\ndef helper():\n    pass\n```\n"
              "First try:\n```py\nclass ModelNew:\n    v = 1\n```\nRevised:\n```python\nclass ModelNew:\n    v = 2\n```\n")
    assert "v = 2" in extract_code(answer)


def test_extract_code_keeps_a_block_with_a_syntax_error_for_the_verifier():
    code = extract_code((FIXTURES / "relu_affine_compile_error.md").read_text())
    assert "class ModelNew" in code and code.count("+ 1.0 +") == 1


def test_extract_code_accepts_an_unterminated_fence_and_bare_code():
    assert "x = 1" in extract_code("```python\nclass ModelNew:\n    x = 1\n")
    assert "y = 2" in extract_code("import torch\n\nclass ModelNew:\n    y = 2\n")


def test_extract_code_with_no_code_block_says_so():
    with pytest.raises(LLMError, match="no ```python code block"):
        extract_code((FIXTURES / "no_code.md").read_text())


def test_extract_code_names_the_wrong_class():
    with pytest.raises(LLMError) as info:
        extract_code((FIXTURES / "wrong_class.md").read_text())
    assert "FusedReluAffine" in str(info.value) and "not class ModelNew" in str(info.value)


def test_extract_code_ignores_blocks_in_other_languages():
    with pytest.raises(LLMError, match="only cpp blocks"):
        extract_code("```cpp\nclass ModelNew {};\n```")


# --- prompts --------------------------------------------------------------------------
def test_declared_transformations_reads_the_docstring_line_in_vocabulary_order():
    from kernelrag.draft.prompts import declared_transformations

    src = '"""transformations: tiling, made_up_id, elementwise_fusion\n\nmore"""\nimport torch\n'
    assert declared_transformations(src) == ["tiling", "elementwise_fusion"]
    assert declared_transformations("import torch\n") == []


def test_kernel_prompt_carries_every_part_it_is_given():
    from kernelrag.patterns import from_signature
    from kernelrag.draft.prompts import kernel_messages
    from kernelrag.types import Citation, GpuFigures, Passage, RetrievedContext, SkillRef, Transformation

    ctx = RetrievedContext(
        task_source=(FIXTURES / "task_relu_affine.py").read_text(), task_path=None,
        pattern=from_signature("relu>mul>add"),
        passages=[Passage(Citation(1, "corpus/fusion.md", section="Fusion", start_line=3, end_line=9),
                          "Fuse elementwise chains into one kernel.", 0.9)],
        transformations=[Transformation("elementwise_fusion", 0.8, ["4/4 ok, median 1.9x eager on NVIDIA H200"])],
        failures=["vectorized_loads -> incorrect on NVIDIA H200 float32 small [log-1]: mask missing"])
    gpu = GpuFigures(name="NVIDIA H200", sms=132, bandwidth_gbps=4100.0, fp32_tflops=51.0)
    example = (SkillRef("relu", "relu", "elementwise", "triton", "verified", transformations=["vectorized_loads"]),
               "class ModelNew: pass  # the relu kernel")
    first = kernel_messages(ctx, gpu, examples=[example])
    assert [m["role"] for m in first] == ["system", "user"]
    user = first[1]["content"]
    for needle in ("torch.relu(x) * 2.0 + 1.0", "Op pattern: relu>mul>add", "NVIDIA H200; SMs: 132",
                   "4100 GB/s", "bf16 compute: unknown", "elementwise_fusion (score 0.80)", "median 1.9x eager",
                   "mask missing", "[1] corpus/fusion.md § Fusion, lines 3-9", "Fuse elementwise chains",
                   "Worked example: skill relu", "the relu kernel"):
        assert needle in user, needle
    second = kernel_messages(ctx, gpu, previous_answer="```python\nclass ModelNew: ...\n```",
                             feedback="Verification result: compile_error. syntax error at line 3")
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "syntax error at line 3" in second[-1]["content"]


def test_kernel_prompt_names_the_ops_the_composed_draft_left_in_pytorch():
    from kernelrag.draft.lower.lowering import lower
    from kernelrag.draft.prompts import kernel_messages
    from kernelrag.types import GpuFigures, RetrievedContext

    src = (FIXTURES / "task_relu_affine.py").read_text().replace(
        "torch.relu(x) * 2.0 + 1.0", "torch.softmax(torch.sort(torch.relu(x), dim=1)[0], dim=1)")
    whole = lower(src)
    assert not whole.ok and "sort" in whole.reason          # the offline drafter never gets a partial draft
    composed = lower(src, partial=True)
    assert composed.ok and len(composed.unplaced) == 1 and composed.unplaced[0].startswith("sort")
    ctx = RetrievedContext(task_source=src, task_path=None, pattern=None)
    user = kernel_messages(ctx, GpuFigures(name="NVIDIA H200"), composed=composed)[1]["content"]
    assert "Left in PyTorch (no template places them" in user and "- sort (" in user
    assert "torch.sort(" in user and "def rowwise_" in user and "def elementwise_" in user
    failed = kernel_messages(ctx, GpuFigures(name="NVIDIA H200"), composed=whole)[1]["content"]
    assert "kernelrag's lowering could not compose this task" in failed and whole.reason in failed
