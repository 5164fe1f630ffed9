"""The closed expression language of the op records (docs/pricing.md).

An expression is Python arithmetic over numbers and names: `+ - * / // % **`, unary `+ - not`,
comparisons, `and`/`or`, conditional expressions and calls of `max`, `min` (two arguments or
more) and `log2` (one; a power of two's is exact, so `2 ** -(-log2(x) // 1)` is the least power
of two at or above x). Anything else
(attributes, subscripts, strings, lambdas, comprehensions, other calls, keywords, starred
arguments, names starting with `_`) is refused when the text is parsed, with an ExprError
that names the construct.

A validated tree is compiled once to a Python code object and evaluated with `eval` against a
mapping of names and no builtins, so the arithmetic is Python's own (bit for bit) and names
are looked up lazily: only the branch taken reads its names. The few ways plain arithmetic can
run away are bounded: the text length, the tree depth and literal sizes are checked at parse
time, and `**` goes through a guard that refuses results beyond MAX_POW_BITS and complex
results. Every failure, at parse or evaluation time, is an ExprError with a stable `reason`.
"""

from __future__ import annotations

import ast
import copy
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from speccat.catalogue.errors import ReasonError

MAX_LENGTH = 1000  # characters of expression text
MAX_DEPTH = 64  # nesting depth of the syntax tree
MAX_LITERAL = 2**1024  # number literals must be smaller (the float range)
MAX_POW_BITS = 4096  # the largest |a ** b| an integer power may build, in bits

FUNCTIONS = ("max", "min", "log2")
_ARITY = {"max": (2, None), "min": (2, None), "log2": (1, 1)}  # the fewest and most arguments


class ExprError(ReasonError):
    """A refused or failed expression: a code of the vocabulary's `expr` group."""

    group = "expr"


# Node types and operators of the closed set.
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_UNARYOPS = (ast.UAdd, ast.USub, ast.Not)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_ALLOWED = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    *_BINOPS,
    *_UNARYOPS,
    *_CMPOPS,
)

# What a refused node is called in the error message.
_CONSTRUCTS: dict[type, str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscript",
    ast.Slice: "slice",
    ast.Lambda: "lambda",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.comprehension: "comprehension",
    ast.keyword: "keyword argument",
    ast.Starred: "starred argument",
    ast.NamedExpr: "assignment expression (:=)",
    ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string",
    ast.List: "list display",
    ast.Tuple: "tuple display",
    ast.Set: "set display",
    ast.Dict: "dict display",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.MatMult: "operator @",
    ast.LShift: "operator <<",
    ast.RShift: "operator >>",
    ast.BitAnd: "operator &",
    ast.BitOr: "operator |",
    ast.BitXor: "operator ^",
    ast.Invert: "operator ~",
    ast.Is: "operator is",
    ast.IsNot: "operator is not",
    ast.In: "operator in",
    ast.NotIn: "operator not in",
}


def _describe(node: ast.AST) -> str:
    return _CONSTRUCTS.get(type(node), type(node).__name__)


def _check_constant(node: ast.Constant) -> None:
    value = node.value
    if isinstance(value, bool) or value is None or value is Ellipsis:
        raise ExprError("forbidden", f"the constant {value!r} is not allowed; only numbers are")
    if isinstance(value, (str, bytes)):
        raise ExprError("forbidden", f"string literal {value!r:.40} is not allowed; only numbers are")
    if isinstance(value, complex):
        raise ExprError("forbidden", f"imaginary number {value!r} is not allowed")
    if not isinstance(value, (int, float)):
        raise ExprError("forbidden", f"constant of type {type(value).__name__} is not allowed")
    if abs(value) >= MAX_LITERAL or (isinstance(value, float) and not math.isfinite(value)):
        raise ExprError("too_large", f"number literal {node.value!r:.40} is beyond 2**1024")


def _check_name(name: str) -> None:
    if name.startswith("_"):
        kind = "dunder name" if name.startswith("__") else "name starting with '_'"
        raise ExprError("forbidden", f"{kind} {name!r} is not allowed")


def _check_node(node: ast.AST, parent: ast.AST | None) -> None:
    if not isinstance(node, _ALLOWED):
        raise ExprError("forbidden", f"{_describe(node)} is not allowed")
    if isinstance(node, ast.Constant):
        _check_constant(node)
    elif isinstance(node, ast.Name):
        _check_name(node.id)
        is_callee = isinstance(parent, ast.Call) and parent.func is node
        if node.id in FUNCTIONS and not is_callee:
            raise ExprError("forbidden", f"{node.id!r} may only be called, not used as a value")
    elif isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Name):
            raise ExprError("forbidden", f"call of {_describe(func)} is not allowed; only {', '.join(FUNCTIONS)} may be called")
        _check_name(func.id)
        if func.id not in FUNCTIONS:
            raise ExprError("forbidden", f"call of {func.id!r} is not allowed; only {', '.join(FUNCTIONS)} may be called")
        if node.keywords:
            raise ExprError("forbidden", f"keyword argument in {func.id}() is not allowed")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ExprError("forbidden", f"starred argument in {func.id}() is not allowed")
        fewest, most = _ARITY[func.id]
        if len(node.args) < fewest or (most is not None and len(node.args) > most):
            wanted = f"at least {fewest}" if most is None else f"exactly {fewest}"
            raise ExprError("forbidden", f"{func.id}() needs {wanted} argument(s), got {len(node.args)}")


def _validate(tree: ast.Expression) -> frozenset[str]:
    """Check every node against the closed set and the depth bound; return the names read."""
    names: set[str] = set()
    stack: list[tuple[ast.AST, ast.AST | None, int]] = [(tree, None, 0)]
    while stack:
        node, parent, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError("too_deep", f"the expression nests deeper than {MAX_DEPTH} levels")
        _check_node(node, parent)
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
        stack.extend((child, node, depth + 1) for child in ast.iter_child_nodes(node))
    return frozenset(names)


def _safe_pow(base: Any, exponent: Any) -> Any:
    """`base ** exponent`, refusing integer results beyond MAX_POW_BITS and complex results."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * math.log2(abs(base)) > MAX_POW_BITS:
            raise ExprError("too_large", f"{base} ** {exponent} would exceed 2**{MAX_POW_BITS}")
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise ExprError("domain", f"{base} ** {exponent}: a negative number to a fractional power")
    return base**exponent


class _PowToCall(ast.NodeTransformer):
    """Route `a ** b` through the guarded power (the name `_pow` cannot be written in text)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            call = ast.Call(func=ast.Name(id="_pow", ctx=ast.Load()), args=[node.left, node.right], keywords=[])
            return ast.copy_location(call, node)
        return node


def _fold(greater: bool):
    """max or min over scalars and numpy arrays with Python's own rule: an argument replaces
    the current best only when strictly greater (less), so ties keep the first."""

    def pick(*args: Any) -> Any:
        best = args[0]
        for arg in args[1:]:
            wins = arg > best if greater else arg < best
            best = np.where(wins, arg, best) if isinstance(wins, np.ndarray) else (arg if wins else best)
        return best

    return pick


def _log2(value: Any) -> Any:
    """log2 of a positive number (math.log2: exact at powers of two), or elementwise of an array."""
    if isinstance(value, np.ndarray):
        return np.log2(value)
    if value <= 0:
        raise ExprError("domain", f"log2({value}): not a positive number")
    return math.log2(value)


# The only globals an expression sees: no builtins, the functions, the guarded power.
_GLOBALS: dict[str, Any] = {"__builtins__": {}, "max": max, "min": min, "log2": _log2, "_pow": _safe_pow}
_ARRAY_GLOBALS: dict[str, Any] = {"__builtins__": {}, "max": _fold(True), "min": _fold(False), "log2": _log2, "_pow": _safe_pow}

# numpy's float floor_divide follows CPython's float floor division step for step (fmod, then
# the same sign correction and rounding), so `//` is exact element for element too.
_ELEMENTWISE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)


def _elementwise(node: ast.AST, arrays: frozenset[str]) -> tuple[bool, bool]:
    """(depends on an array name, evaluates exactly element for element) for `node`."""
    if isinstance(node, ast.Name):
        return node.id in arrays, True
    if isinstance(node, ast.Call):  # max/min: the callee name is not an argument
        children = [_elementwise(arg, arrays) for arg in node.args]
    else:
        children = [_elementwise(child, arrays) for child in ast.iter_child_nodes(node)]
    depends = any(d for d, _ in children)
    exact = all(e for _, e in children)
    if not depends:
        return False, exact
    if isinstance(node, ast.BinOp):
        return True, exact and isinstance(node.op, _ELEMENTWISE_BINOPS)
    if isinstance(node, ast.UnaryOp):
        return True, exact and isinstance(node.op, (ast.UAdd, ast.USub))
    if isinstance(node, ast.Call):  # numpy's log2 need not round as math.log2 does
        return True, exact and node.func.id in ("max", "min") and all(d for d, _ in children)
    return True, False


class Expr:
    """One parsed, validated and compiled expression. Call it with a mapping of names."""

    __slots__ = ("source", "names", "_tree", "_code", "_elementwise")

    def __init__(self, source: str):
        if not isinstance(source, str):
            raise ExprError("syntax", f"an expression must be text, got {type(source).__name__}")
        if len(source) > MAX_LENGTH:
            raise ExprError("too_long", f"the expression is {len(source)} characters; at most {MAX_LENGTH}")
        try:
            with warnings.catch_warnings():  # text such as `1if x else 2` warns; it is parsed all the same
                warnings.simplefilter("ignore", SyntaxWarning)
                tree = ast.parse(source.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise ExprError("syntax", f"not an expression: {err}") from None
        self.names = _validate(tree)
        self._tree = tree
        self._elementwise: dict[frozenset[str], bool] = {}
        compiled = ast.fix_missing_locations(_PowToCall().visit(copy.deepcopy(tree)))
        try:
            self._code = compile(compiled, "<expr>", "eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise ExprError("syntax", f"cannot compile: {err}") from None
        self.source = source

    def __call__(self, names: Mapping[str, Any]) -> int | float | bool:
        """Evaluate against `names`, looking up only the names the taken branches read.

        A mapping that raises something other than KeyError or TypeError for a name (for
        example a ValueError saying why a layer cannot supply it) has it propagate unchanged.
        """
        value = self._run(_GLOBALS, names)
        if isinstance(value, float) and not math.isfinite(value):
            raise ExprError("not_finite", f"{self.source}: evaluates to {value}")
        if not isinstance(value, (int, float)):
            raise ExprError("bad_type", f"{self.source}: evaluates to a {type(value).__name__}")
        return value

    def _run(self, globals_: dict[str, Any], names: Mapping[str, Any]) -> Any:
        try:
            return eval(self._code, globals_, names)  # noqa: S307 - a validated, closed tree
        except ZeroDivisionError as err:
            raise ExprError("zero_division", f"{self.source}: {err}") from None
        except (OverflowError, FloatingPointError) as err:
            raise ExprError("overflow", f"{self.source}: {err}") from None
        except NameError as err:
            raise ExprError("unknown_name", f"{self.source}: {err}") from None
        except TypeError as err:
            raise ExprError("bad_type", f"{self.source}: {err}") from None

    def elementwise(self, array_names: frozenset[str]) -> bool:
        """Whether evaluating with `array_names` bound to float64 numpy arrays (the other names
        to scalars) gives, element for element, exactly what evaluating with each element
        bound to that Python float gives.

        True when every node whose value depends on an array name is such a name, `+ - * / //`,
        unary `+ -`, or max/min of arguments that all depend on array names: numpy applies
        these as the same IEEE operations Python applies to floats (max and min are folded
        with the same comparisons as Python's), and each such node is a float in Python.
        Comparisons, `and/or/not`, conditionals, `** %` on array values are not.
        """
        known = self._elementwise.get(array_names)
        if known is None:
            known = self._elementwise[array_names] = _elementwise(self._tree.body, array_names)[1]
        return known

    def map(self, names: Mapping[str, Any]) -> Any:
        """Evaluate with some names bound to numpy arrays (see `elementwise`), returning an
        array or a scalar, unchecked. Run it under `numpy.errstate(divide="raise",
        over="raise", invalid="raise")` so that what Python refuses, numpy refuses too."""
        return self._run(_ARRAY_GLOBALS, names)

    def canonical(self) -> str:
        """The expression's text with formatting normalised (used in version hashes)."""
        return ast.unparse(ast.parse(self.source.strip(), mode="eval"))

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"

