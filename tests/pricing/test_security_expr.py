"""The expression language has no way out (issue 7, item 4; catalogue/records/expr.py, docs/pricing.md).

tests/pricing/test_expr.py fuzzes arithmetic built from the closed set and a few forbidden constructs.
Here the fuzz is aimed at escapes: the generated expressions mix known Python sandbox-escape
payloads (dunder walks to `object.__subclasses__`, `__import__`, `open`, lambdas and
comprehensions, walrus, f-strings, Unicode look-alikes that NFKC folds into `max` or
`__import__`, powers that would run for ever) into arithmetic, and random text comes from all of
Unicode. Every example goes through two oracles: one written here from the language as docs/pricing.md states it says
whether the text is outside the language, and then it must be refused when it is parsed; and
test_expr's: an expression is refused or fails with a documented reason, or it evaluates, calls
nothing but max, min and the guarded power, and equals Python's own arithmetic. `fuzz(n)` runs
both fuzzes at n examples each (`python -m bench reliability` runs it at 20,000); the suite runs
SUITE_EXAMPLES.
"""

from __future__ import annotations

import ast
import builtins
import keyword

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.expr_fuzz import LEAVES, combine
from support.expr_fuzz import check as check_arithmetic

from speccat.catalogue.records.expr import Expr, ExprError

SUITE_EXAMPLES = 1500

PAYLOADS = [
    "().__class__.__bases__[0].__subclasses__()",
    "h.__class__.__mro__[-1].__subclasses__()",
    "__import__('os').system('true')",
    "open('/etc/passwd').read()",
    "(lambda: 0).__globals__",
    "max.__self__",
    "max.__call__(h, 1)",
    "getattr(max, '__self__')",
    "[c for c in ().__class__.__base__.__subclasses__()]",
    "breakpoint()",
    "globals()",
    "vars()",
    "type(h)",
    "print(h)",
    "open",
    "help",
    "f'{h}'",
    "b'\\x00'",
    "(x := h)",
    "h[0]",
    "h[::-1]",
    "max(*[h, 1])",
    "max(h, key=abs)",
    "max(h)",
    "max",
    "__builtins__",
    "_pow(2, 3)",
    "_safe_pow",
    "ｍａｘ(h, 1)",  # fullwidth: NFKC folds it to max
    "＿＿import＿＿('os')",  # fullwidth low lines fold to __import__
    "ℎ + 𝐡",  # mathematical letters fold to h
    "9 ** 9 ** 9 ** 9",
    "(10 ** 100) ** (10 ** 100)",
    "h ** h ** h",
    "1e309",
    "-1e309 * 0",
    "0 ** -1",
    "h / zero",
    "h if __import__('os') else h",
    "max(h, __import__('os'))",
    "min(h, open)",
    "h and open or h",
    "not __builtins__",
]

# The language as docs/pricing.md states it, written apart from catalogue/records/expr.py: the node types, the two
# functions, number constants only, and (speccat's rule) no name starting with "_".
LANGUAGE = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.And, ast.Or,
    ast.Compare, ast.IfExp, ast.Call, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.UAdd, ast.USub, ast.Not, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)  # fmt: skip
PARSE_REASONS = ("syntax", "forbidden", "too_long", "too_deep", "too_large")


def outside_the_language(source: str) -> bool:
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # not Python: test_expr's oracle expects the refusal
    for node in ast.walk(tree):
        if not isinstance(node, LANGUAGE):
            return True
        if isinstance(node, ast.Call) and (node.keywords or not (isinstance(node.func, ast.Name) and node.func.id in ("max", "min"))):
            return True
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
            return True
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            return True
    return False


def check(source: str) -> None:
    """Refused when parsed if outside the language; else the shared arithmetic oracle (tests/support/expr_fuzz.py)."""
    if outside_the_language(source):
        try:
            Expr(source)
        except ExprError as err:
            assert err.reason in PARSE_REASONS, (source, err)
            return
        raise AssertionError(f"{source!r} is outside the language, but was accepted")
    check_arithmetic(source)


# test_expr's arithmetic, with escape payloads among its leaves.
ESCAPES = st.recursive(st.one_of(LEAVES, st.sampled_from(PAYLOADS)), combine, max_leaves=12)
TEXT = st.text(max_size=60)


@settings(max_examples=SUITE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ESCAPES)
def test_fuzz_escape_payloads_in_arithmetic(source):
    check(source)


@settings(max_examples=SUITE_EXAMPLES, deadline=None)
@given(TEXT)
def test_fuzz_random_unicode_text(source):
    check(source)


def test_each_payload_alone_is_refused_or_harmless():
    for source in PAYLOADS:
        check(source)


def test_no_builtin_is_visible_by_its_name():
    # Names resolve only in the mapping handed in: a builtin's name is an unknown name (or a
    # refused construct: True, max used as a value), never the builtin.
    for name in dir(builtins):
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            continue
        try:
            expression = Expr(name)
        except ExprError as err:
            assert err.reason == "forbidden", name
            continue
        try:
            value = expression({})
        except ExprError as err:
            assert err.reason == "unknown_name", (name, err)
        else:
            raise AssertionError(f"{name} evaluated to {value!r}")


def test_look_alikes_fold_to_what_they_imitate():
    # Python folds identifiers with NFKC: the fullwidth max is max, and is called as max; the
    # mathematical h is h. A fullwidth low line cannot start a name, so a look-alike of
    # __import__ is not even Python (and written with a plain _ it is refused by name).
    assert Expr("ｍａｘ(h, 1)")({"h": 4}) == 4
    assert Expr("ℎ + 𝐡")({"h": 4}) == 8
    for source in ("＿＿import＿＿('os')", "＿pow(2, 3)", "__import__('os')", "_pow(2, 3)"):
        try:
            Expr(source)
        except ExprError as err:
            assert err.reason in ("syntax", "forbidden"), source
        else:
            raise AssertionError(f"{source} was accepted")


def fuzz(examples: int) -> list[tuple[str, str]]:
    """Both fuzzes at `examples` examples each; returns the escapes found as (source, what)."""
    escapes: list[tuple[str, str]] = []

    def record(source: str) -> None:
        try:
            check(source)
        except AssertionError as err:
            escapes.append((source, str(err)))

    for strategy in (ESCAPES, TEXT):
        run = settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))(given(strategy)(record))
        run()
    return escapes
