"""``python -m verified_attn``: the same as the ``verified-attn`` command.

>>> from verified_attn.cli import main
>>> main(["claims", "--markdown"])  # doctest: +ELLIPSIS
| id | paper | statement |
...
0
"""

from __future__ import annotations

from verified_attn.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
