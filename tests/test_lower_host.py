"""The launchers' host-side helpers give what the torch and triton calls they replace give."""
from __future__ import annotations

import pytest
import torch
import triton

from kernelrag.draft.lower.host import HELPERS, used_helpers


@pytest.fixture(scope="module")
def helpers() -> dict:
    namespace: dict = {}
    for text in HELPERS.values():
        exec(text, namespace)     # noqa: S102 - the helpers' own source, as a generated module holds it
    return namespace


SHAPES = [((4, 3, 5), (1, 3, 1)), ((4, 3, 5), (5,)), ((2, 1, 6), (7, 1)), ((3,), ()), ((0, 4), (1, 4)),
          ((2, 3, 4), (2, 3, 4), (1, 1, 4)), ((1,), (1, 1, 1))]


@pytest.mark.parametrize("shapes", SHAPES)
def test_broadcast_is_torchs_rule(helpers, shapes):
    assert helpers["_broadcast"](*shapes) == tuple(torch.broadcast_shapes(*shapes))


@pytest.mark.parametrize("shapes", [((4, 3), (2, 3)), ((0, 4), (3, 4))])
def test_broadcast_refuses_what_torch_refuses(helpers, shapes):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    with pytest.raises(ValueError, match="do not broadcast"):
        helpers["_broadcast"](*shapes)


@pytest.mark.parametrize("make, domain", [
    (lambda: torch.empty(1, 3, 1), (4, 3, 5)),
    (lambda: torch.empty(5), (4, 3, 5)),
    (lambda: torch.empty(4, 5, 3).permute(0, 2, 1), (4, 3, 5)),
    (lambda: torch.empty(8, 6)[::2, 1:4], (2, 4, 3)),
    (lambda: torch.empty(1, 1), (1, 1)),            # size-1 dims kept: their own strides, as expand keeps them
    (lambda: torch.empty(0, 4), (3, 0, 4)),
])
def test_strides_are_the_expanded_views(helpers, make, domain):
    t = make()
    assert helpers["_strides"](t, domain) == t.expand(domain).stride()


def test_cdiv_and_pow2_are_tritons(helpers):
    assert all(helpers["_pow2"](n) == triton.next_power_of_2(n) for n in range(0, 3000))
    assert all(helpers["_cdiv"](a, b) == triton.cdiv(a, b) for a in range(0, 200) for b in range(1, 33))


def test_only_the_helpers_called_are_written():
    texts = ["    domain = _broadcast(a0.shape, a1.shape)\n    k[(_cdiv(n, 4),)](a0)"]
    assert used_helpers(texts) == [HELPERS["_broadcast"], HELPERS["_cdiv"]]
    assert used_helpers(["    k[(n,)](a0, triton.cdiv)"]) == []


@pytest.mark.parametrize("make", [
    lambda: torch.empty(3, 4, 5, device="meta"),
    lambda: torch.empty(4, 5, 3, device="meta").permute(2, 0, 1),
    lambda: torch.empty(1, 5, device="meta").expand(7, 5),
    lambda: torch.empty(8, 6, device="meta")[::2, 1:4],
    lambda: torch.empty(0, 3, device="meta"),
])
def test_wide_is_the_farthest_offset(helpers, make):
    t = make()
    reach = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    assert helpers["_wide"](t) is (reach >= 2**31)
    assert helpers["_wide"](t, torch.empty(2**31, device="meta")) is True


def test_wide_sees_a_strided_view_past_int32(helpers):
    wide = torch.empty(2, 2**30 + 8, device="meta")[:, :8]      # 16 elements, offsets past 2**30
    assert helpers["_wide"](wide) is False
    assert helpers["_wide"](torch.empty(3, 2**30, device="meta")[:, :8]) is True
