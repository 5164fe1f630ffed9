"""The expression fuzzer both expression test modules share: generated sources and the oracle.

`check(source)` parses and evaluates one generated expression under a profiler: it is refused
with a stable reason, or it is plain arithmetic whose value equals Python's own evaluation of
the same text, bit for bit, having called nothing but max, min and the guarded power.
"""

from __future__ import annotations

import gc
import sys

from hypothesis import strategies as st

from speccat.catalogue.records import expr as expr_module
from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.vocabulary import REASONS as ALL_REASONS

REASONS = ALL_REASONS["expr"]


def same_bits(x, y) -> bool:
    """Equal value and type; floats compared by their exact hex representation."""
    if type(x) is not type(y):
        return False
    return x.hex() == y.hex() if isinstance(x, float) else x == y


LEAVES = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["h", "w", "t", "n", "zero", "unknown", "__class__", "_x", "max", "True", "None", "'s'", "1j", "..."]),
)


def combine(children):
    binary = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "@", "<<", "|", "&", "^", "==", "<", ">=", "!=", "is", "in", "and", "or"])
    unary = st.sampled_from(["-", "+", "not ", "~"])
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(unary, children).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(["max", "min", "abs", "eval", "__import__", "getattr", "h"]), st.lists(children, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
        st.tuples(children, st.sampled_from([".real", "[0]", ".__class__", "(1)"])).map(lambda t: f"{t[0]}{t[1]}"),
        st.tuples(children, children).map(lambda t: f"max({t[0]}, key={t[1]})"),
        children.map(lambda c: f"[x for x in ({c},)]"),
        children.map(lambda c: f"(lambda: {c})()"),
    )


EXPRESSIONS = st.recursive(LEAVES, combine, max_leaves=25)
NAMES = {"h": 4096, "w": 14336.0, "t": 8, "n": 3, "zero": 0}

# What compiled expression code may call: the two functions and the guarded power.
ALLOWED_C = {max, min}
ALLOWED_PY = {expr_module._safe_pow.__code__}


def _evaluate_watched(e: Expr):
    """Evaluate under a profiler recording every function the expression's own code calls."""
    bad: list = []

    def profile(frame, event, arg):
        if event == "c_call" and frame.f_code.co_filename == "<expr>" and arg not in ALLOWED_C:
            bad.append(arg)
        elif event == "call" and frame.f_back.f_code.co_filename == "<expr>" and frame.f_code not in ALLOWED_PY:
            bad.append(frame.f_code)

    gc.disable()  # a collection would run the test tools' gc callbacks inside the expression
    sys.setprofile(profile)
    try:
        try:
            value = e(dict(NAMES))
        except ExprError as err:
            value = err
    finally:
        sys.setprofile(None)
        gc.enable()
    return value, bad


def check(source: str) -> None:
    try:
        e = Expr(source)
    except ExprError as err:
        assert err.reason in REASONS
        return
    value, bad = _evaluate_watched(e)
    assert not bad, f"{source!r} called {bad}"
    if isinstance(value, ExprError):
        assert value.reason in REASONS
        return
    assert isinstance(value, (int, float)) and not isinstance(value, complex)
    # What was accepted and evaluated is Python's own arithmetic on the same values (bounded:
    # the guarded evaluation just finished, and Python runs the same operations).
    expected = eval(source.strip(), {"__builtins__": {"max": max, "min": min}}, dict(NAMES))  # noqa: S307
    assert same_bits(value, expected)
