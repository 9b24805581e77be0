"""Tests written to kill mutants that survived mutmut on the core modules.

See benchmarks/mutation.py and benchmarks/results/mutation.json (each test names the mutant
it was written for).
"""

from __future__ import annotations
