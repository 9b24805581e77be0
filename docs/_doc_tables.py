"""The results tables of the docs, generated from the benchmark JSON (not a page).

A page holds each generated table between two marker comments::

    <!-- table:multi_head_float:begin -->
    ... generated, never edited by hand ...
    <!-- table:multi_head_float:end -->

Run from the repository root::

    python docs/_doc_tables.py            # rewrite every table from benchmarks/results/
    python docs/_doc_tables.py --check    # exit 1 if a page's table differs from its JSON

``tests/test_doc_tables.py`` runs the check, so a table that is not what its JSON says
fails the tests: after a benchmark rewrites its JSON, run the script and commit both.

>>> _range([1, 2, 3, 5, 6, 8])
'1–3, 5, 6, 8'
>>> _num(3.4039e-06), _num(None), _ratio(1.1167), _ratio(1.0)
('3.4e-06', '–', '1.12', '1')
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # verified_attn from this checkout (bits)
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
#: The pages with generated tables, relative to the repository root.
PAGES = ["docs/multi_head.md", "docs/multi_head_float_benchmark.md", "docs/transformer.md"]

_MARKER = re.compile(
    r"(<!-- table:(?P<name>[\w-]+):begin -->\n)(?P<body>.*?)(<!-- table:(?P=name):end -->)",
    re.S,
)
_DASH = "–"
_BOX = {"random": "random", "torch": "nn.MHA"}


def _range(values: Iterable[int]) -> str:
    """Sorted integers with runs of three or more written as ``a–b``."""
    xs = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{xs[i]}{_DASH}{xs[j]}")
        else:
            out.extend(str(x) for x in xs[i : j + 1])
        i = j + 1
    return ", ".join(out)


def _num(x: float | None) -> str:
    """An error figure: two significant digits, or a dash when there is none."""
    return _DASH if x is None else f"{x:.1e}"


def _one(x: float | None) -> str:
    """A figure in bits: one decimal, or a dash when there is none."""
    return _DASH if x is None else f"{x:.1f}"


def _bits(error: float | None) -> str:
    """An error's bits, -log2 (:func:`verified_attn.precision.bits`), one decimal.

    >>> _bits(2.0**-40), _bits(None)
    ('40.0', '–')
    """
    from verified_attn.precision import bits

    return _one(bits(error))


def _ratio(x: float | None) -> str:
    """A ratio: three significant digits, or a dash when there is none."""
    return _DASH if x is None else f"{x:.3g}"


def _seconds(x: float) -> str:
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def _span(xs: list[float]) -> str:
    """The smallest and largest of some seconds (one figure when they round alike)."""
    if not xs:
        return _DASH
    lo, hi = _seconds(min(xs)), _seconds(max(xs))
    return lo if lo == hi else f"{lo}{_DASH}{hi}"


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def exact_table(data: dict[str, Any]) -> str:
    """The canonical learner's learning queries / the follow-up's count, H by d
    (``benchmarks/multi_head.py``: every learned instance, at the precision it needed)."""
    learned = {(r["d"], r["H"]): r for r in data["canonical"] if "queries" in r}
    ds = sorted({d for d, _ in learned})
    hs = sorted({h for _, h in learned})
    rows: list[list[object]] = []
    for h in hs:
        row: list[object] = [h]
        for d in ds:
            r = learned.get((d, h))
            row.append(_DASH if r is None else f"{r['queries']} / {r['follow_up']}")
        rows.append(row)
    return "\n".join(_table(["H", *(f"d = {d}" for d in ds)], rows))


def float_table(data: dict[str, Any]) -> str:
    """The float learner's cells (``benchmarks/multi_head_float.py``), one row per box,
    precision and d, pooled over H and seeds."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for cell in data["summary"]:
        groups.setdefault((cell["kind"], cell["dtype"], cell["d"]), []).append(cell)
    order = sorted(groups, key=lambda k: (k[0] != "random", k[1] != "float64", k[0], k[1], k[2]))
    rows: list[list[object]] = []
    for kind, dtype, d in order:
        cells = groups[(kind, dtype, d)]
        errors = [c["max_parameter_error"] for c in cells if c.get("max_parameter_error")]
        preds = [c["max_prediction_error"] for c in cells if c.get("max_prediction_error")]
        ratio = max(c["max_queries"] / c["follow_up"] for c in cells if c.get("max_queries"))
        medians = [c["median_seconds"] for c in cells if c.get("median_seconds") is not None]
        rows.append(
            [
                f"{_BOX.get(kind, kind)} {dtype}",
                d,
                _range(c["H"] for c in cells),
                f"{sum(c['learned'] for c in cells)}/{sum(c['runs'] for c in cells)}",
                sum(c["wrong"] for c in cells),
                sum(c.get("learned_1e-12", 0) for c in cells),
                _num(max(errors, default=None)),
                _bits(max(errors, default=None)),
                _num(max(preds, default=None)),
                _bits(max(preds, default=None)),
                _ratio(ratio),
                _span(medians),
            ]
        )
    header = ["box", "d", "H", "learned", "wrong", "within 1e-12", "worst parameter error",
              "bits", "worst prediction error", "bits", "queries / follow-up", "median s"]
    return "\n".join(_table(header, rows))


def bits_table(data: dict[str, Any]) -> str:
    """The float learner's cells in bits against the precision goals: the ``precision`` rows
    ``benchmarks/multi_head_float_bits.py`` adds to ``multi_head_float.json``."""
    rows: list[list[object]] = []
    order = sorted(data["precision"], key=lambda p: (p["kind"] != "random", p["dtype"] != "float64",
                                                     p["kind"], p["dtype"], p["d"], p["H"]))
    for p in order:
        rows.append(
            [
                f"{_BOX.get(p['kind'], p['kind'])} {p['dtype']}",
                p["d"],
                p["H"],
                _one(p["median_parameter_bits"]),
                _one(p["min_parameter_bits"]),
                _one(p["min_prediction_bits"]),
                f"{p['goal_bits']:g}",
                f"{p['met_goal']}/{p['seeds']}",
            ]
        )
    header = ["box", "d", "H", "median parameter bits", "worst parameter bits",
              "worst prediction bits", "goal (bits)", "met goal"]
    return "\n".join(_table(header, rows))


def mha_bits_table(data: dict[str, Any]) -> str:
    """The ``nn.MultiheadAttention`` float64 grid (``multi_head_float_bits.py --mha``): per
    cell the parameter bits against the exact truth and the refinement's floors."""
    rows: list[list[object]] = []
    for c in data["summary"]:
        rows.append(
            [
                c["d"],
                c["H"],
                c["head_dim"],
                c["seeds"],
                _one(c["median_parameter_bits"]),
                _one(c["min_parameter_bits"]),
                f"{c['met_46']}/{c['seeds']}",
                _one(c["median_before_refine_bits"]),
                _one(c["min_floor_bits"]),
                _one(c["median_once_rounded_floor_bits"]),
                _one(c["median_answer_rounding_bits"]),
                f"{c['queries']} / {c['follow_up']}",
                c["refinement"],
                f"{c['seconds']:.0f}",
            ]
        )
    header = ["E", "H", "E/H", "seeds", "median bits", "worst bits", ">= 46 bits",
              "median before refinement", "worst floor", "once-rounded floor",
              "answers' rounding", "queries / follow-up", "refinement", "seconds"]
    return "\n".join(_table(header, rows))


def refine_bits_table(data: dict[str, Any]) -> str:
    """The anchor's cell per seed (``multi_head_float_bits.py --refine-seeds``): bits, the
    stated error over the true one, and the floors that say where the error comes from
    (the bits and the floor to two decimals: the goal is met or not at the second)."""
    rows: list[list[object]] = []
    for r in data["runs"]:
        rows.append(
            [
                r["seed"],
                f"{r['parameter_bits']:.2f}",
                "yes" if r["parameter_bits"] >= data["summary"]["goal_bits"] else "no",
                _one(r["stated_bits"]),
                f"{r['stated_over_true']:.1f}",
                _one(r["before_refine_bits"]),
                f"{r['floor_bits']:.2f}",
                _one(r["once_rounded_floor_bits"]),
                _one(r["all_random_floor_bits"]),
                f"{r['cond']:.0f}",
                f"{r['box_noise_units']:.0f}",
                f"{r['queries']} / {r['follow_up']}",
                r["polish"],
                r["refinement"],
            ]
        )
    header = ["seed", "bits", ">= 51", "stated bits", "stated / true", "before refinement",
              "floor", "once-rounded floor", "all-random floor", "condition",
              "box noise (2^-53)", "queries / follow-up", "polish", "refinement"]
    return "\n".join(_table(header, rows))


def _cells_sentence(cells: list[list[Any]]) -> str:
    """The ablation's cells, ``[kind, dtype, d, H, seeds]`` each (``seeds`` a count, or
    the list of seeds run), grouped by box and d."""
    groups: dict[tuple[str, str, int], list[tuple[int, str]]] = {}
    for kind, dtype, d, h, seeds in cells:
        said = (f"{seeds} seeds" if isinstance(seeds, int)
                else "seed" + ("s " if len(seeds) > 1 else " ") + ", ".join(map(str, seeds)))
        groups.setdefault((kind, dtype, d), []).append((h, said))
    parts = []
    for (kind, dtype, d), hs in groups.items():
        by_seeds: dict[str, list[int]] = {}
        for h, said in hs:
            by_seeds.setdefault(said, []).append(h)
        runs = "; ".join(f"H = {_range(h)} ({said})" for said, h in by_seeds.items())
        parts.append(f"{_BOX.get(kind, kind)} {dtype} d = {d}, {runs}")
    return "; ".join(parts)


def _ablation_cells(data: dict[str, Any]) -> list[list[Any]]:
    """Every cell the ablation ran, once: ``meta.settings.cells``, or the union over the
    runs it was assembled from (``meta.settings.runs``)."""
    settings = data["meta"]["settings"]
    batches = settings["runs"] if "runs" in settings else [settings]
    out: list[list[Any]] = []
    for batch in batches:
        out += [c for c in batch["cells"] if c not in out]
    return out


def ablation_table(data: dict[str, Any]) -> str:
    """Each stage switched off in turn (``benchmarks/multi_head_ablation.py``): one row per
    single switch in the JSON's order, then sentences on the switches off together, the
    cells and what moved."""
    header = ["stage off", "learned", "wrong", "rescued", "gained", "worst parameter error",
              "parameter error ratio", "queries ratio", "past follow-up"]
    rows: list[list[object]] = []
    moved, together = [], []
    for s in data["summary"]:
        if "+" in s["switch"]:
            together.append(s)
            continue
        name = "none (as shipped)" if s["switch"] == "none" else f"`{s['switch']}`"
        rows.append(
            [name, f"{s['learned']}/{s['runs']}", s["wrong"], s["rescued"], s["gained"],
             _num(s.get("max_parameter_error")), _ratio(s.get("parameter_error_ratio")),
             _ratio(s.get("queries_ratio")), s.get("over_follow_up", _DASH)]
        )
        changes = [
            f"{what} x{_ratio(s.get(key))}"
            for key, what in (("parameter_error_ratio", "parameter error"),
                              ("queries_ratio", "queries"))
            if s.get(key) is not None and _ratio(s.get(key)) != "1"
        ]
        changes += [f"{what} {s[what]}" for what in ("wrong", "rescued", "gained") if s[what]]
        if s["switch"] != "none" and changes:
            moved.append(f"`{s['switch']}` ({', '.join(changes)})")
    lines = _table(header, rows)
    if together:
        learned = sum(s["learned"] for s in together)
        runs = sum(s["runs"] for s in together)
        wrong = sum(s["wrong"] for s in together)
        worst = max(s.get("queries_ratio") or 1.0 for s in together)
        lines += ["", f"Switched off together ({len(together)} combinations of the restart "
                  f"stages): {learned}/{runs} learned, {wrong} wrong, queries ratio at most "
                  f"{_ratio(worst)}."]
    lines += ["", f"Cells: {_cells_sentence(_ablation_cells(data))}. "
              + ("Differences from the learner as shipped: "
                 + "; ".join(moved) + "." if moved
                 else "No stage off changes a figure on these cells.")]
    return "\n".join(lines)


def head_count_table(data: dict[str, Any]) -> str:
    """The float head count (``benchmarks/head_count_float.py``): per box and precision,
    counts equal to the true H over all d, max_heads and seeds; then the totals."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in data["summary"]:
        groups.setdefault((cell["kind"], cell["dtype"]), []).append(cell)
    hs = sorted({c["H"] for c in data["summary"]})
    order = sorted(groups, key=lambda k: (k[0] != "random", k[1] != "float64", k))
    rows: list[list[object]] = []
    for kind, dtype in order:
        cells = groups[(kind, dtype)]
        row: list[object] = [f"{_BOX.get(kind, kind)} {dtype}", _range(c["d"] for c in cells)]
        for h in hs:
            at = [c for c in cells if c["H"] == h]
            row.append(f"{sum(c['correct'] for c in at)}/{sum(c['runs'] for c in at)}"
                       if at else _DASH)
        row += [sum(c["over"] for c in cells), sum(c["refusals"] for c in cells)]
        rows.append(row)
    header = ["box", "d", *(f"H = {h}" for h in hs), "over", "refused"]
    tail = max(c["max_tail_over_floor"] for c in data["summary"])
    lines = _table(header, rows)
    lines += ["", f"{data['counts']} counts, {data['overcounts']} overcounts; the largest "
              f"singular value past the true count is at most {tail:.2g} of the floor."]
    return "\n".join(lines)


def transformer_heads_table(data: dict[str, Any]) -> str:
    """The multi-head Transformer rows of ``benchmarks/transformer.py --multi-head-only``
    (``kind`` "multi-head"): queries against the learned form's free parameters, the
    learner's and the certificate check's seconds, the run's peak RSS."""
    header = ["arithmetic", "d, H, m", "seed", "width m′ of g", "heads", "learning queries "
              "(FFN + cells)", "bound", "free parameters", "queries / parameters",
              "verification", "learn", "certificate check", "peak RSS"]
    rows: list[list[object]] = []
    for r in (r for r in data["rows"] if r.get("kind") == "multi-head"):
        head: list[object] = [r["arithmetic"], f"{r['d']}, {r['H']}, {r['m']}", r["seed"]]
        if "refused" in r:
            rows.append([*head, f"refused: {r['refused'][:60]}", *[_DASH] * 9])
            continue
        rows.append([
            *head, r["width"], r["heads_found"],
            f"{r['queries']} ({r['ffn_queries']} + {r['attention_queries']})", r["bound"],
            r["parameter_count"], f"{r['queries_per_parameter']:.1f}",
            r["verification_queries"], f"{_seconds(r['seconds'])} s",
            f"{_seconds(r['certificate_check_seconds'])} s", f"{r['peak_rss_mib']:.0f} MiB",
        ])
    return "\n".join(_table(header, rows))


def transformer_heads_float_table(data: dict[str, Any]) -> str:
    """The float multi-head Transformer rows of ``benchmarks/transformer.py
    --multi-head-float-only`` (``kind`` "multi-head-float"): queries against the free
    parameters, the stated and true (W_h, c_h) errors and the fresh prediction gap in
    bits, the float rule's largest ratio on 24 more fresh sequences ("refuted" if one is
    outside it), the learner's seconds and the run's peak RSS."""
    header = ["box", "d, H, m", "seed", "width m′", "heads", "learning queries (FFN + cells)",
              "bound", "free parameters", "queries / parameters", "estimate",
              "(W_h, c_h) error (bits)", "prediction gap (bits)", "24 more: rule ratio",
              "learn", "peak RSS"]
    rows: list[list[object]] = []
    for r in (r for r in data["rows"] if r.get("kind") == "multi-head-float"):
        head: list[object] = [r["source"], f"{r['d']}, {r['H']}, {2 * r['d']}", r["seed"]]
        if "refused" in r:
            # A refusal's cost: the queries it asked, its seconds and memory (rows since
            # the benchmark records them).
            asked = f"{r['queries']} asked" if r.get("queries") is not None else _DASH
            cost = [
                f"{_seconds(r['seconds'])} s" if r.get("seconds") is not None else _DASH,
                f"{r['peak_rss_mib']:.0f} MiB" if r.get("peak_rss_mib") is not None else _DASH,
            ]
            rows.append([*head, f"refused: {r['refused'][:70]}", _DASH, asked, *[_DASH] * 7,
                         *cost])
            continue
        rows.append([
            *head, r["width"], r["heads_found"],
            f"{r['queries']} ({r['ffn_queries']} + {r['attention_queries']})", r["bound"],
            r["parameter_count"], f"{r['queries_per_parameter']:.1f}",
            _num(r["parameter_error_estimate"]),
            f"{_num(r['parameter_error_W_c'])} ({_bits(r['parameter_error_W_c'])})",
            f"{_num(r['prediction_error'])} ({_bits(r['prediction_error'])})",
            "refuted" if "fresh_refuted" in r else f"{r['fresh_max_ratio']:.2g}",
            f"{_seconds(r['seconds'])} s", f"{r['peak_rss_mib']:.0f} MiB",
        ])
    return "\n".join(_table(header, rows))


def transformer_biased_table(data: dict[str, Any]) -> str:
    """The FFN-bias rows of ``benchmarks/transformer.py --biased-only`` (``kind``
    "biased"): the FFN learner's queries (lines) against the canonical parameter count, and
    the single-head Transformer's queries (FFN + attention) against d^2 + (m' + 1)(d + 1),
    with W compared ``==`` (exact) or its max relative error and the fresh gap (float); the
    learners' seconds and the row's peak RSS (each row in its own process)."""
    header = ["arithmetic", "d, m", "seed", "FFN queries (lines)", "(m′ + 1)(d + 1)",
              "FFN ratio", "Transformer queries (FFN + attention)", "parameters",
              "W", "verification gap", "learn (FFN / Transformer)", "peak RSS"]
    rows: list[list[object]] = []
    for r in (r for r in data["rows"] if r.get("kind") == "biased"):
        head: list[object] = [r["arithmetic"], f"{r['d']}, {r['m']}", r["seed"]]
        if "ffn_refused" in r:
            rows.append([*head, f"refused: {r['ffn_refused'][:60]}", *[_DASH] * 8])
            continue
        lines = f"{r['ffn_queries']} ({r['ffn_lines']})"
        if r.get("ffn_equal") is False:  # exact, not the truth: say whether it was assumed
            lines += " ≠ truth" + ("" if r["window_holds"] else " (a hyperplane outside the window)")
        head += [lines, r["canonical_parameter_count"], f"{r['ffn_ratio']:.2f}"]
        tail = [f"{_seconds(r['ffn_seconds'])} s / "
                + (f"{_seconds(r['transformer_seconds'])} s" if "transformer_seconds" in r
                   else _DASH), f"{r['peak_rss_mib']:.0f} MiB"]
        if "transformer_refused" in r:
            rows.append([*head, f"refused: {r['transformer_refused'][:60]}", *[_DASH] * 5])
        elif "transformer_queries" not in r:
            rows.append([*head, "not run (d > 8)", *[_DASH] * 3, *tail])
        else:
            exact = "transformer_W_equal" in r
            rows.append([
                *head, f"{r['transformer_queries']} ({r['ffn_queries_in_transformer']} + "
                f"{r['attention_queries']})", r["transformer_parameter_count"],
                ("==" if r["transformer_W_equal"] else "differs") if exact else
                f"{_num(r['transformer_W_error'])} ({_bits(r['transformer_W_error'])} bits)",
                _DASH if exact else _num(r["transformer_verification_error"]), *tail,
            ])
    return "\n".join(_table(header, rows))


def transformer_ffn_table(data: dict[str, Any]) -> str:
    """The bias-free FFN rows of ``benchmarks/transformer.py`` (``kind`` "bias-free-ffn"),
    one line per size with its seeds in order: canonical widths, learning queries (exact =
    certified), the canonical parameter count m'(d + 1) and their ratio."""
    header = ["d", "m (random)", "m'", "queries (exact = certified)", "m'(d + 1)", "ratio"]
    rows: list[list[object]] = []
    ffn = sorted((r for r in data["rows"] if r.get("kind") == "bias-free-ffn"),
                 key=lambda r: (r["d"], r["m"], r["seed"]))
    for d, m in sorted({(r["d"], r["m"]) for r in ffn}):
        sel = [r for r in ffn if (r["d"], r["m"]) == (d, m)]

        def join(key: str, sel: list[dict[str, Any]] = sel) -> str:
            return ", ".join(str(r[key]) for r in sel)

        rows.append([d, m, join("canonical_width"), join("queries"), join("parameter_count"),
                     ", ".join(f"{r['ratio']:.2f}" for r in sel)])
    return "\n".join(_table(header, rows))


#: Each table: the JSON file it is generated from and its renderer.
TABLES: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "multi_head": ("multi_head.json", exact_table),
    "multi_head_float": ("multi_head_float.json", float_table),
    "multi_head_ablation": ("multi_head_ablation.json", ablation_table),
    "head_count_float": ("head_count_float.json", head_count_table),
    # on docs/multi_head_float_benchmark.md
    "multi_head_float_bits": ("multi_head_float.json", bits_table),
    "multi_head_refine_bits": ("multi_head_refine_bits.json", refine_bits_table),
    "multi_head_mha_bits": ("multi_head_mha_bits.json", mha_bits_table),
    # on docs/transformer.md
    "transformer_ffn": ("transformer.json", transformer_ffn_table),
    "transformer_biased": ("transformer.json", transformer_biased_table),
    "transformer_heads": ("transformer.json", transformer_heads_table),
    "transformer_heads_float": ("transformer.json", transformer_heads_float_table),
}


def render(text: str, results: Path = RESULTS) -> str:
    """``text`` with every marked table generated again from the JSON in ``results``.

    >>> render("a\\n<!-- table:nope:begin -->\\nold\\n<!-- table:nope:end -->\\n")
    Traceback (most recent call last):
    ...
    KeyError: "no generator for the table 'nope'"
    """
    cache: dict[str, dict[str, Any]] = {}

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"no generator for the table {name!r}")
        source, make = TABLES[name]
        if source not in cache:
            cache[source] = json.loads((results / source).read_text(encoding="utf-8"))
        return f"{match[1]}{make(cache[source])}\n{match[4]}"

    return _MARKER.sub(fill, text)


def tables_in(text: str) -> list[str]:
    """The names of the marked tables of a page, in order.

    >>> tables_in("<!-- table:a:begin -->\\nx\\n<!-- table:a:end -->")
    ['a']
    """
    return [m["name"] for m in _MARKER.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` compare) every page's tables; 1 when a check fails."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON directory")
    parser.add_argument("pages", nargs="*", type=Path, help="pages (default: the docs')")
    args = parser.parse_args(argv)
    pages = args.pages or [ROOT / p for p in PAGES]
    stale: list[object] = []
    if not args.pages:  # every table must be on some page: a deleted marker pair is stale
        shown = {n for p in pages for n in tables_in(p.read_text(encoding="utf-8"))}
        for name in sorted(set(TABLES) - shown):
            print(f"the table {name!r} is on none of {PAGES}", file=sys.stderr)
            stale.append(name)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if not tables_in(text):
            print(f"{page}: no generated tables (markers missing)", file=sys.stderr)
            stale.append(page)
            continue
        new = render(text, args.results)
        if new == text:
            continue
        if args.check:
            stale.append(page)
            print(f"{page}: tables differ from {args.results}; run python docs/_doc_tables.py",
                  file=sys.stderr)
        else:
            page.write_text(new, encoding="utf-8")
            print(f"{page}: tables written", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
