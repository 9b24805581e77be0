"""Shared pytest configuration: the Hypothesis settings profiles.

Select one with the environment variable ``HYPOTHESIS_PROFILE`` (default ``dev``)::

    HYPOTHESIS_PROFILE=ci pytest

``ci`` is derandomized with a fixed example count, so a CI run is reproducible; ``dev``
draws fresh examples each run. Neither has a deadline: exact SymPy arithmetic is slow and
its timing varies, and timing belongs in ``benchmarks/``, not in tests.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=25,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
