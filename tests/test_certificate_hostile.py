"""Hostile certificates: every malformed or malicious input is a CertificateError, fast.

A checker is the trusted core: whatever a file holds (huge numbers, deep nesting, wrong
types anywhere, code in an expression, absurd sizes) it must answer with a
:class:`CertificateError` naming the field, well under a second, and never with another
exception or a hang.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from verified_attn import Oracle, SingleHeadAttention, learn_single_head
from verified_attn.certificates import load_certificate, verify_certificate
from verified_attn.errors import CertificateError
from verified_attn.serialize import load_number, load_rational

#: A hang guard, not a speed target (speed lives in benchmarks/, and this machine is
#: shared): without the kernel's bounds these inputs take minutes or never finish; with
#: them each is refused in milliseconds to a second (a genuine d = 2 certificate checks in
#: a few milliseconds).
FAST = 15.0

MODEL = SingleHeadAttention([[Fraction(1, 2), -2], [3, Fraction(-1, 3)]], [0, 5])
AFFINE = SingleHeadAttention(
    [[Fraction(1, 2), -2], [3, 0]], [0, 5], c=[1, Fraction(-1, 3)], beta=Fraction(2, 7)
)
ARITHMETICS = ("exact", "certified", "float")


def _certificate(model: SingleHeadAttention, arithmetic: str) -> dict[str, Any]:
    rec = learn_single_head(Oracle(model, arithmetic), seed=3, verify=3)
    return json.loads(json.dumps(rec.certificate()))


@pytest.fixture(scope="module")
def certs() -> dict[str, dict[str, Any]]:
    out = {a: _certificate(MODEL, a) for a in ARITHMETICS}
    out.update({f"affine-{a}": _certificate(AFFINE, a) for a in ARITHMETICS})
    return out


def refused(check: Callable[[], Any], match: str | None = None) -> CertificateError:
    """Run ``check``; it must raise CertificateError (matching ``match``) within FAST s."""
    start = time.perf_counter()
    with pytest.raises(CertificateError, match=match) as info:
        check()
    elapsed = time.perf_counter() - start
    assert elapsed < FAST, f"refused, but only after {elapsed:.2f} s"
    return info.value


def test_the_genuine_certificates_check(certs) -> None:
    # The control: every hostile variant below starts from one of these.
    for data in certs.values():
        assert verify_certificate(data).ok


# ---------------------------------------------------------------------------------------
# Numbers: huge exponents and digits, bad radii, NaN and infinities.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1e999999999",
        "1" * 10**6,
        "1/" + "7" * 10**6,
        "9" * 5000,  # past Python's int-string limit (4300 digits): no ValueError escapes
        "1/" + "3" * 5000,
        "0x10",
        "1/0",
        "1.5",
        " 1/2",
        "--1",
        "",
    ],
    ids=lambda t: t[:12] + ("..." if len(t) > 12 else ""),
)
def test_rational_strings(certs, text: str) -> None:
    refused(lambda: load_rational(text))
    data = copy.deepcopy(certs["exact"])
    data["design"]["U"][0][0] = text
    refused(lambda: verify_certificate(data), r"design.U\[0\]\[0\]")
    data = copy.deepcopy(certs["exact"])
    data["answers"]["v"][1] = {"rational": text}
    refused(lambda: verify_certificate(data), r"answers.v\[1\]")


@pytest.mark.parametrize(
    "radius", ["-1/4", "-1/1000000000000", "-0/1" + "x", "1/0", "1e999999999", "9" * 5000]
)
def test_bad_radii(certs, radius: str) -> None:
    data = copy.deepcopy(certs["certified"])
    mid = data["answers"]["W"][0][1]["arb"][0]
    data["answers"]["W"][0][1] = {"arb": [mid, radius]}
    refused(lambda: verify_certificate(data), r"answers.W\[0\]\[1\]")


def test_zero_radius_claim_is_an_overclaim(certs) -> None:
    # A zero (non-positive) radius on a claimed ball claims an exact value the answers do
    # not give; a zero-radius answer is refused because it decodes to a ball that the
    # claim (made from the real answer) does not equal, or checks: never another error.
    data = _certificate_balls()
    ball = data["result"]["parameters"]["W"][1][0]["arb"]
    data["result"]["parameters"]["W"][1][0] = {"arb": [ball[0], "0/1"]}
    refused(lambda: verify_certificate(data), r"result W\[1\]\[0\]: the claimed ball")
    data = _certificate_balls()
    data["answers"]["W"][1][0]["arb"][1] = "0/1"
    try:
        verify_certificate(data)
    except CertificateError:
        pass


def _certificate_balls() -> dict[str, Any]:
    rec = learn_single_head(Oracle(MODEL, "certified", precision=64), denominator_bound=1)
    return json.loads(json.dumps(rec.certificate()))


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
@pytest.mark.parametrize(
    "number",
    [
        {"float": "inf"},
        {"float": "-inf"},
        {"float": "nan"},
        {"float": "0x1p+999999999"},  # overflows float.fromhex
        {"float": "0x" + "f" * 10**6},
        {"float": 1.5},
        {"arb": ["inf", "0/1"]},
        {"arb": ["1/2", "nan"]},
        {"arb": ["1/2"]},
        {"arb": "1/2"},
        {"rational": 1},
        {"rational": None},
        {"sympy": 5},
        {"unknown": "1/2"},
        {"rational": "1/2", "float": "0x1p-1"},
        {},
    ],
    ids=lambda n: json.dumps(n)[:24],
)
def test_malformed_or_non_finite_numbers(certs, arithmetic: str, number: Any) -> None:
    refused(lambda: load_number(number) if "float" not in number else _finite(number))
    for where in ("answers", "verification", "result"):
        data = copy.deepcopy(certs[arithmetic])
        if where == "answers":
            data["answers"]["v"][0] = number
        elif where == "verification":
            data["verification"]["answers"][1] = number
        else:
            data["result"]["parameters"]["v"][0] = number
        refused(lambda d=data: verify_certificate(d))


def _finite(number: dict[str, Any]) -> Any:
    import math

    x = load_number(number)
    if isinstance(x, float) and not math.isfinite(x):
        raise CertificateError(f"{x} is not finite")
    return x


def test_nan_and_infinity_json_literals(tmp_path: Path, certs) -> None:
    # Python's json reads NaN / Infinity literals as floats: each must still be refused.
    for field, value in (
        ("rtol", "NaN"),
        ("rtol", "Infinity"),
        ("d", "NaN"),
        ("seed", "-Infinity"),
    ):
        data = copy.deepcopy(certs["float"])
        data[field] = "@@"
        path = tmp_path / "cert.json"
        path.write_text(json.dumps(data).replace('"@@"', value))
        refused(lambda p=path: verify_certificate(p), field)


# ---------------------------------------------------------------------------------------
# Structure: nesting, truncation, wrong types at every level.
# ---------------------------------------------------------------------------------------


def test_deep_nesting_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    refused(lambda: verify_certificate(path), "nested too deeply|JSON object")
    path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    refused(lambda: verify_certificate(path), "nested too deeply|format")


def test_deep_nesting_inside_a_field(certs) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    for path in (("design", "U"), ("answers", "v"), ("verification", "answers"), ("assumptions",)):
        data = copy.deepcopy(certs["certified"])
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = deep
        refused(lambda d=data: verify_certificate(d))
    data = copy.deepcopy(certs["certified"])
    data["answers"]["v"][0] = {"arb": deep}
    refused(lambda: verify_certificate(data), r"answers.v\[0\]")


def test_huge_integer_in_json_text(tmp_path: Path, certs) -> None:
    # json.loads refuses ints past 4300 digits with a bare ValueError: not ours to leak.
    text = json.dumps(certs["exact"]).replace('"seed": 3', '"seed": ' + "9" * 10**5, 1)
    path = tmp_path / "cert.json"
    path.write_text(text)
    refused(lambda: verify_certificate(path), "not valid JSON")


@pytest.mark.parametrize("arithmetic", ["exact", "affine-certified"])
def test_truncated_files(tmp_path: Path, certs, arithmetic: str) -> None:
    text = json.dumps(certs[arithmetic])
    path = tmp_path / "cert.json"
    for cut in range(0, len(text), max(1, len(text) // 97)):
        path.write_text(text[:cut])
        refused(lambda p=path: verify_certificate(p))
    path.write_bytes(b"\xff\xfe" + text.encode()[:100])
    refused(lambda: verify_certificate(path), "cannot read|not valid JSON")


def _walk(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every node of a JSON value with its path (the root excluded)."""
    if path:
        yield path, obj
    if isinstance(obj, dict):
        for key, val in obj.items():
            yield from _walk(val, (*path, key))
    elif isinstance(obj, list):
        for i, val in enumerate(obj):
            yield from _walk(val, (*path, i))


def _wrong_types(value: Any) -> list[Any]:
    """Values of every JSON type but ``value``'s (bool, int and float count as different)."""
    candidates = [None, True, 7, 2.5, "x", [1, 2], {"a": 1}]
    return [c for c in candidates if type(c) is not type(value)]


@pytest.mark.parametrize("arithmetic", [*ARITHMETICS, *(f"affine-{a}" for a in ARITHMETICS)])
def test_wrong_types_at_every_level(certs, arithmetic: str) -> None:
    base = certs[arithmetic]
    tried = 0
    for path, value in list(_walk(base)):
        for wrong in _wrong_types(value):
            if path[-2:] == ("verification", "precision") and wrong is None:
                # A valid value, not a wrong type: the fresh sequences asked at the oracle's
                # own precision (a replayed transcript cannot raise it); still checked.
                continue
            data = copy.deepcopy(base)
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = wrong
            start = time.perf_counter()
            try:
                verify_certificate(data)
            except CertificateError:
                pass
            else:
                pytest.fail(f"{'.'.join(map(str, path))} = {wrong!r} was accepted")
            assert time.perf_counter() - start < FAST
            tried += 1
    assert tried > 300  # the walk reached the whole certificate


# ---------------------------------------------------------------------------------------
# Sizes a file can name: d, precision, verification count and lengths, list lengths.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: c.update(d=10**9), "d must be an int in 1..1024"),
        (lambda c: c.update(d=10**400), "d must be an int in 1..1024"),
        (lambda c: c.update(d=-2), "d must be an int in 1..1024"),
        (lambda c: c.update(d=1025), "d must be an int in 1..1024"),
        (lambda c: c.update(d=3), r"design.U has 2 entries, expected 3"),
        (lambda c: c.update(precision=10**9), "precision must be an int in 32..65536"),
        (lambda c: c.update(precision=2**16 + 1), "precision must be an int in 32..65536"),
        (lambda c: c["verification"].update(count=10**12), "verification.count must be"),
        (lambda c: c["verification"].update(count=-1), "verification.count must be"),
        (lambda c: c["verification"].update(lengths=[10**9]), r"verification.lengths\[0\]"),
        (lambda c: c["verification"].update(lengths=[0]), r"verification.lengths\[0\]"),
        (lambda c: c["verification"].update(lengths=[]), "verification.lengths must not be"),
        (lambda c: c["verification"].update(lengths=[4096] * 10**5), "verification.lengths"),
        (
            lambda c: c["verification"].update(count=10**6, lengths=[4096]),
            "more sequence entries than a checker reads",
        ),
        (lambda c: c["verification"].update(seed=-1), "verification.seed must be an int >= 0"),
        (lambda c: c["answers"]["W"].append([]), "answers.W has 3 entries, expected 2"),
        (lambda c: c["answers"]["v"].pop(), r"answers.v has 1 entries, expected 2"),
        (lambda c: c["design"]["scales"][1].pop(), r"design.scales\[1\] has 1 entries"),
        (lambda c: c["design"].update(scales=[["1/1"] * 2] * 10**6), "design.scales has"),
        (lambda c: c["queries"]["by_phase"].update(W=10**400), "queries.learning is"),
        (lambda c: c.update(assumptions=["x" * 10**6]), "assumptions must be a list of str"),
        (lambda c: c.update(theorem="t" * 10**6), "theorem must be a short string"),
    ],
    # No backslash in an id (the regexes' "\\["): pytest could not select such a node id
    # again, and mutmut (benchmarks/mutation.py) selects every test by its id.
    ids=lambda x: "" if callable(x) else x.replace("\\", "")[:30],
)
def test_sizes(certs, edit, match) -> None:
    data = copy.deepcopy(certs["certified"])
    edit(data)
    refused(lambda: verify_certificate(data), match)


def test_huge_seed_is_not_a_hang(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["verification"]["seed"] = 10**4000  # a legal int: the sequences differ, fast
    refused(lambda: verify_certificate(data), r"verification.answers\[\d\]")


def test_huge_list_in_an_error_message_is_not_rendered_in_full(certs) -> None:
    data = copy.deepcopy(certs["certified"])
    data["d"] = list(range(10**6))
    err = refused(lambda: verify_certificate(data), "d must be an int")
    assert len(str(err)) < 300


# ---------------------------------------------------------------------------------------
# Expressions (exact answers are SymPy srepr text): code is never run, sizes are bounded.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('echo hacked')",
        "__import__('os')",
        "Integer(1).__class__.__bases__",
        "Integer(1).p",
        "(lambda: 1)()",
        "Add.__call__(1, 2)",
        "getattr(Integer(1), 'p')",
        "[x for x in ()]",
        "Pow(Integer(2), Integer(10**10))",
        "Pow(Integer(2), Integer(10000000000))",
        "Pow(Integer(10), Integer(99999))",
        "Pow(Pow(Integer(2), Integer(10000)), Integer(10000))",
        "Pow(Mul(Integer(7), exp(Integer(1))), Integer(10000))",
        "Pow(Pow(Pow(Integer(3), Integer(9000)), Integer(9000)), Integer(9000))",
        "Mul(" + ", ".join(["Pow(Integer(3), Integer(9999))"] * 200) + ")",
        "Pow(Integer(2), Rational(100000001, 2))",
        "exp(Integer(" + "9" * 4000 + "))",
        "exp(Pow(Integer(10), Integer(9999)))",
        "Integer(" + "9" * 5000 + ")",
        "Float('1e999999999')",
        "Float('nan')",
        "Symbol('x')",
        "Add(" * 5000 + "Integer(1)" + ")" * 5000,
        "Integer(1)" + " " * 200_000,
        "Rational(1, 0)",
        "Integer('1')",
        "Integer(1, 2, 3)",
    ],
    ids=lambda t: t[:30],
)
def test_expressions(certs, text: str) -> None:
    data = copy.deepcopy(certs["exact"])
    data["answers"]["W"][0][0] = {"sympy": text}
    refused(lambda: verify_certificate(data), r"answers.W\[0\]\[0\]")


def test_expression_in_a_verification_answer(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["verification"]["answers"][2] = {"sympy": "__import__('os').getcwd()"}
    refused(lambda: verify_certificate(data), r"verification.answers\[2\]")
    data["verification"]["answers"][2] = {"sympy": "exp(Integer(" + "9" * 4000 + "))"}
    refused(lambda: verify_certificate(data), r"verification.answers\[2\]")


def test_expressions_only_in_exact_certificates(certs) -> None:
    for arithmetic in ("certified", "float"):
        data = copy.deepcopy(certs[arithmetic])
        data["answers"]["v"][0] = {"sympy": "Integer(1)"}
        refused(lambda d=data: verify_certificate(d), r"answers.v\[0\]: a 'sympy' number")


# ---------------------------------------------------------------------------------------
# The file as a whole.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["", "null", "[]", '"x"', "7", "{", '{"format": "verified-attn-certificate/2"}']
)
def test_not_a_certificate(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cert.json"
    path.write_text(text)
    refused(lambda: verify_certificate(path))


def test_a_directory_is_not_a_certificate(tmp_path: Path) -> None:
    refused(lambda: load_certificate(tmp_path), "cannot read certificate")


@pytest.mark.parametrize("kind", [None, 7, [], "single-head " * 10**5, "../../etc"])
def test_unknown_kinds(certs, kind: Any) -> None:
    data = copy.deepcopy(certs["exact"])
    data["kind"] = kind
    err = refused(lambda: verify_certificate(data), "unknown kind")
    assert len(str(err)) < 400


def test_wide_expressions_are_bounded(certs) -> None:
    # Many distinct exponentials in one answer: within the node budget, refused fast.
    wide = "Add(" + ", ".join(f"exp(Rational({k}, 7))" for k in range(1, 3000)) + ")"
    data = copy.deepcopy(certs["exact"])
    data["verification"]["answers"][0] = {"sympy": wide}
    refused(lambda: verify_certificate(data), r"verification.answers\[0\]")
    data = copy.deepcopy(certs["exact"])
    data["answers"]["W"][1][1] = {"sympy": wide}
    refused(lambda: verify_certificate(data))


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_the_float_rule_bias_is_not_the_files_to_choose(certs, arithmetic: str) -> None:
    # A bias loosens or tightens the float rule (gaps are relative to |answer - bias|):
    # it must be the claimed beta in affine float mode, and absent everywhere else.
    data = copy.deepcopy(certs[f"affine-{arithmetic}"])
    if arithmetic == "float":
        assert data["verification"]["bias"] == data["result"]["parameters"]["beta"]
        data["verification"]["bias"] = {"float": (0.0).hex()}
        refused(lambda: verify_certificate(data), "verification.bias is .* claimed beta")
        data["verification"]["bias"] = None
        refused(lambda: verify_certificate(data), "verification.bias is None")
    else:
        data["verification"]["bias"] = {"rational": "1/1"}
        refused(lambda: verify_certificate(data), "verification.bias must be null")
    data = copy.deepcopy(certs[arithmetic])
    data["verification"]["bias"] = data["answers"]["v"][1]
    refused(lambda: verify_certificate(data), "verification.bias must be null")


def test_a_dense_heavy_design_is_refused_before_inverting_it(certs) -> None:
    # A dense 200 x 200 rational U would take the exact inverse ~10 s (d^3 growth): the
    # checker refuses it by its work budget, before any linear algebra.
    d = 200
    data = copy.deepcopy(certs["exact"])
    data["d"] = d
    data["design"]["U"] = [
        [f"{(i * 7 + j * 3) % 19 - 9}/{1 + (i + j) % 7}" for j in range(d)] for i in range(d)
    ]
    data["design"]["scales"] = [["1/1"] * d for _ in range(d)]
    data["answers"]["v"] = [{"rational": "1/1"}] * d
    data["answers"]["W"] = [[{"rational": "1/2"}] * d for _ in range(d)]
    n = d * d + d
    data["queries"].update(learning=n, bound=n)
    data["queries"]["by_phase"].update(v=d, W=d * d)
    refused(lambda: verify_certificate(data), "design.U .* heavier than this checker inverts")


def test_wrong_types_in_an_unverified_certificate() -> None:
    # verify=0: the verification section is empty and the bias null; still fully typed.
    rec = learn_single_head(Oracle(AFFINE, "float"), verify=0)
    base = json.loads(json.dumps(rec.certificate()))
    assert verify_certificate(base).ok
    for path, value in list(_walk(base)):
        for wrong in _wrong_types(value):
            if path[-2:] == ("verification", "precision") and wrong is None:
                # A valid value, not a wrong type: the fresh sequences asked at the oracle's
                # own precision (a replayed transcript cannot raise it); still checked.
                continue
            data = copy.deepcopy(base)
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = wrong
            with pytest.raises(CertificateError):
                verify_certificate(data)
