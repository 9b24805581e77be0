"""The module adapters' shared box keywords (dtype, budget, record, rtol, parameter_rtol).

Declared once (:class:`~verified_attn.adapters.torch.BoxOptions`) and read by
:func:`~verified_attn.adapters.torch.box_settings`; each adapter must take exactly these
keywords with the defaults its docstring states.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the verified-attn[torch] extra")

from verified_attn.adapters.torch import BoxOptions, attention_oracle  # noqa: E402
from verified_attn.adapters.torch_block import block_oracle  # noqa: E402
from verified_attn.errors import InvalidArgument, QueryBudgetExceeded  # noqa: E402


def _mha() -> Any:
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(3, 1, batch_first=True)


def _attention(**kw: Any) -> Any:
    return attention_oracle(_mha(), [1.0, 0.0, 0.0], **kw)


def _block(**kw: Any) -> Any:
    torch.manual_seed(0)
    return block_oracle(_mha(), torch.nn.Linear(3, 6), torch.nn.Linear(6, 1), **kw)


ADAPTERS = [("attention_oracle", _attention), ("block_oracle", _block)]


def test_the_keyword_set() -> None:
    assert BoxOptions.__optional_keys__ == {"dtype", "budget", "record", "rtol", "parameter_rtol"}


@pytest.mark.parametrize(("name", "make"), ADAPTERS, ids=[n for n, _ in ADAPTERS])
def test_defaults_and_given_values(name: str, make: Any) -> None:
    plain = make()
    assert plain.arithmetic.rtol == 1e-6
    assert plain.arithmetic.unit_roundoff == 2.0**-53
    single = make(dtype="float32")
    assert (single.arithmetic.rtol, single.arithmetic.parameter_rtol) == (1e-4, 1e-3)
    assert single.arithmetic.unit_roundoff == 2.0**-24
    given = make(dtype=torch.float32, rtol=1e-2, parameter_rtol=5e-2)
    assert (given.arithmetic.rtol, given.arithmetic.parameter_rtol) == (1e-2, 5e-2)
    limited = make(budget=1)
    limited.query(np.zeros((1, 3)))
    with pytest.raises(QueryBudgetExceeded):
        limited.query(np.zeros((1, 3)))


@pytest.mark.parametrize(("name", "make"), ADAPTERS, ids=[n for n, _ in ADAPTERS])
def test_bad_and_unknown_keywords(name: str, make: Any) -> None:
    with pytest.raises(InvalidArgument, match="dtype must be 'float64' or 'float32'"):
        make(dtype="float16")
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'rtl'$"):
        make(rtl=1e-3)
