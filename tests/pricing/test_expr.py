"""The closed expression language (catalogue/records/expr.py, docs/pricing.md)."""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from speccat.catalogue.records.expr import MAX_DEPTH, MAX_LENGTH, Expr, ExprError

from support.expr_fuzz import EXPRESSIONS, check, same_bits

THE_EXPRESSION = "(0.5*h + 0.5*w if n % 2 == 0 else 1/3*h + 2/3*w) * (b*n) + (d or h/a)"


def python_reference(h, w, n, b, d, a):
    """The same expression written as Python source: the oracle for bit-for-bit equality."""
    return (0.5 * h + 0.5 * w if n % 2 == 0 else 1 / 3 * h + 2 / 3 * w) * (b * n) + (d or h / a)


number = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)


@given(h=number, w=number, n=number, b=number, d=number, a=number)
@example(h=51, w=0, n=0, b=0, d=0, a=2.8098982271825745e-307)  # h / a overflows: hypothesis found it
def test_the_design_expression_is_python_arithmetic_bit_for_bit(h, w, n, b, d, a):
    names = dict(h=h, w=w, n=n, b=b, d=d, a=a)
    try:
        expected = python_reference(**names)
    except ZeroDivisionError:
        with pytest.raises(ExprError) as err:
            Expr(THE_EXPRESSION)(names)
        assert err.value.reason == "zero_division"
        return
    if not math.isfinite(expected):  # finite inputs can overflow (h / a with a ~1e-307): refused, never priced
        with pytest.raises(ExprError) as err:
            Expr(THE_EXPRESSION)(names)
        assert err.value.reason == "not_finite"
        return
    assert same_bits(Expr(THE_EXPRESSION)(names), expected)


def test_the_design_expression_at_chosen_values():
    # n = 3 is odd: (1/3*10 + 2/3*4) * (2*3) + (0 or 10/5), each step as Python does it.
    names = dict(h=10, w=4, n=3, b=2, d=0, a=5)
    value = Expr(THE_EXPRESSION)(names)
    assert same_bits(value, (1 / 3 * 10 + 2 / 3 * 4) * (2 * 3) + 10 / 5)
    # n = 4 is even and d = 7 is truthy: (5 + 2) * 8 + 7 = 63.0
    assert Expr(THE_EXPRESSION)(dict(names, n=4, d=7)) == 63.0


class Recorder(dict):
    """A names mapping that records each lookup and fails loudly on 'missing'."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: list[str] = []

    def __getitem__(self, key):
        self.read.append(key)
        if key == "missing":
            raise AssertionError("the untaken branch was looked up")
        return super().__getitem__(key)


def test_names_are_looked_up_lazily_only_on_the_branch_taken():
    names = Recorder(h=10, flag=1)
    assert Expr("h if flag else missing")(names) == 10
    assert "missing" not in names.read
    names = Recorder(flag=0, other=2)
    assert Expr("flag and missing or other")(names) == 2
    assert Expr("max(flag, 1) if flag else other")(names) == 2
    assert "missing" not in names.read


def test_names_lists_every_name_read_on_any_branch():
    assert Expr("h if flag else missing + max(a, b)").names == {"h", "flag", "missing", "a", "b"}


def test_max_min_and_comparisons_are_pythons():
    names = {"t": 4, "x": -2.5}
    assert Expr("max(t, 1) / min(t, 2)")(names) == 2.0
    assert Expr("min(x, t, 0)")(names) == -2.5
    assert Expr("1 < t <= 4 and not x > 0")(names) is True


REFUSED = [
    ("h.real", "attribute access"),
    ("a[0]", "subscript"),
    ("'text'", "string literal"),
    ("b'bytes'", "string literal"),
    ("lambda: 1", "lambda"),
    ("[x for x in y]", "list comprehension"),
    ("(x for x in y)", "generator expression"),
    ("{x: 1 for x in y}", "dict comprehension"),
    ("abs(h)", "call of 'abs'"),
    ("eval('1')", "call of 'eval'"),
    ("max(h, key=a)", "keyword argument"),
    ("max(*h)", "starred argument"),
    ("max(h)", "at least 2 argument"),
    ("log2(h, w)", "exactly 1 argument"),
    ("log2", "may only be called"),
    ("__import__('os')", "dunder name '__import__'"),
    ("__builtins__", "dunder name '__builtins__'"),
    ("_pow(2, 3)", "name starting with '_'"),
    ("(h).__class__", "attribute access"),
    ("max", "may only be called"),
    ("(1, 2)", "tuple display"),
    ("[1]", "list display"),
    ("{1: 2}", "dict display"),
    ("f'{h}'", "f-string"),
    ("(y := 3)", "assignment expression"),
    ("h @ w", "operator @"),
    ("h << 2", "operator <<"),
    ("h | w", "operator |"),
    ("~h", "operator ~"),
    ("h is None", "the constant None"),
    ("h is w", "operator is"),
    ("h in w", "operator in"),
    ("True", "the constant True"),
    ("1j", "imaginary number"),
    ("...", "the constant Ellipsis"),
]


def test_log2_gives_the_least_power_of_two_at_or_above():
    """The idiom ends.yaml prices Liger's chunk with: exact at powers of two, up elsewhere."""
    pow2 = Expr("2 ** -(-log2(q) // 1)")
    assert [pow2({"q": q}) for q in (1, 2, 3, 4, 5, 255, 256, 257, 1000)] == [1, 2, 4, 4, 8, 256, 256, 512, 1024]
    with pytest.raises(ExprError) as err:
        Expr("log2(q)")({"q": 0})
    assert err.value.reason == "domain"
    assert not Expr("log2(q)").elementwise(frozenset({"q"}))  # numpy's log2 need not round as math's
    assert Expr("max(q, w)").elementwise(frozenset({"q", "w"}))


@pytest.mark.parametrize("source, construct", REFUSED)
def test_constructs_outside_the_closed_set_are_refused_naming_them(source, construct):
    with pytest.raises(ExprError) as err:
        Expr(source)
    assert err.value.reason == "forbidden"
    assert construct in str(err.value)


@pytest.mark.parametrize(
    "source, reason",
    [
        ("h +", "syntax"),
        ("h = 1", "syntax"),
        ("1\x00", "syntax"),
        ("x" * (MAX_LENGTH + 1), "too_long"),
        ("-" * 200 + "1", "too_deep"),
        ("(" * 250 + "1" + ")" * 250, "syntax"),  # CPython's own limit on nested parentheses
        ("+".join(["h"] * (MAX_DEPTH + 2)), "too_deep"),
        ("1" + "0" * 400, "too_large"),
        ("1e400", "too_large"),
    ],
)
def test_bad_text_is_refused_at_parse_time(source, reason):
    with pytest.raises(ExprError) as err:
        Expr(source)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    "source, reason",
    [
        ("9 ** 9 ** 9", "too_large"),  # 9**387420489 would take minutes and gigabytes
        ("(2 ** 4000) ** 2", "too_large"),
        ("10 ** 10 ** 10 % 7", "too_large"),
        ("2.0 ** 10000", "overflow"),
        ("1e300 * 1e300", "not_finite"),
        ("1e300 * 1e300 - 1e300 * 1e300", "not_finite"),
        ("(-8) ** 0.5", "domain"),
        ("1 / 0", "zero_division"),
        ("1 % 0", "zero_division"),
        ("0 ** -1", "zero_division"),
        ("10 ** 300 * 10 ** 300 / 1", "overflow"),
        ("h / nothing", "unknown_name"),
    ],
)
def test_runaway_arithmetic_ends_in_the_documented_error(source, reason):
    with pytest.raises(ExprError) as err:
        Expr(source)({"h": 1.0})
    assert err.value.reason == reason


def test_powers_within_bounds_are_pythons_own():
    assert Expr("2 ** 100")({}) == 2**100
    assert Expr("(-2) ** 3")({}) == -8
    assert same_bits(Expr("2 ** -2")({}), 0.25)
    assert same_bits(Expr("h ** 0.5")({"h": 2.0}), 2.0**0.5)


def test_errors_of_the_names_mapping_propagate_unchanged():
    class Refusal(ValueError):
        pass

    class Names(dict):
        def __missing__(self, key):
            raise Refusal(f"cannot supply {key}")

    with pytest.raises(Refusal):
        Expr("h + 1")(Names())


def test_a_value_that_is_not_a_number_is_refused():
    with pytest.raises(ExprError) as err:
        Expr("h")({"h": "text"})
    assert err.value.reason == "bad_type"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS)
def test_fuzz_generated_expressions(source):
    check(source)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=string.printable, max_size=80) | st.text(max_size=40))
def test_fuzz_random_text(source):
    check(source)


def test_canonical_text_ignores_layout():
    assert Expr("a*b  +(c)").canonical() == Expr("a * b + c").canonical()
    assert Expr("a*(b+c)").canonical() != Expr("a*b+c").canonical()


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(finite, finite.filter(lambda v: abs(v) > 1e-3)), min_size=1, max_size=20))
def test_floor_division_over_arrays_is_pythons_element_for_element(pairs):
    """The fast path may bind names to arrays in `//` (scan_chunks in records.yaml does)."""
    import numpy as np

    expr = Expr("(s + c - 1) // c")
    assert expr.elementwise(frozenset({"s", "c"}))
    s, c = (np.array(column, dtype=np.float64) for column in zip(*pairs))
    with np.errstate(divide="raise", over="raise", invalid="raise"):
        got = expr.map({"s": s, "c": c})
    for value, (a, b) in zip(got.tolist(), pairs):
        assert same_bits(value, expr({"s": a, "c": b}))
