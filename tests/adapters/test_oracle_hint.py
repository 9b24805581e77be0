"""``va.Oracle(module)`` with a PyTorch or transformers module names the adapters.

>>> _Fake.__module__
'torch.nn.modules.fake'

Needs no optional extra: the check looks at the class's module name only (importing torch
to ask ``isinstance`` would make ``import verified_attn`` pull it in).
"""

from __future__ import annotations

import pytest

import verified_attn as va


class _Fake:
    """Stands in for an nn.Module: a class whose module name starts with "torch"."""


_Fake.__module__ = "torch.nn.modules.fake"


class _FakeHF:
    pass


_FakeHF.__module__ = "transformers.models.gpt2.modeling_gpt2"


@pytest.mark.parametrize("cls", [_Fake, _FakeHF])
def test_torch_and_transformers_objects_get_the_adapters_named(cls: type) -> None:
    with pytest.raises(va.InvalidArgument) as info:
        va.Oracle(cls())
    message = str(info.value)
    assert "verified_attn.adapters.torch.attention_oracle(module, readout)" in message
    assert "nn.MultiheadAttention" in message
    assert "verified_attn.adapters.hf.attention_oracle(module, readout)" in message


def test_other_objects_keep_the_from_callable_hint() -> None:
    with pytest.raises(va.InvalidArgument, match=r"Oracle\.from_callable") as info:
        va.Oracle(object())
    assert "adapters" not in str(info.value)
