"""The rules that state why a repo's census parameter count and the Hub's differ
(catalogue/hub_params.yaml), as the rows of the catalogue's `param_rules` table.

The view repo_params (sql/views/repo_params.sql) applies them, so a rule changes with the data
file and no code: this module only reads and checks the file. Each refusal is a ParamsError with
a reason of the vocabulary's `params` group, naming the file and the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from speccat.catalogue.datafile import Loader, read_yaml
from speccat.catalogue.errors import ReasonError
from speccat.catalogue.vocabulary import PARAM_CAUSES

RULES_PATH = Path(__file__).with_name("hub_params.yaml")
# How a rule tests the difference (the file's header says what each means).
DIFFERENCE_TESTS: tuple[str, ...] = ("equals", "at_most", "positive", "negative")
# The spec's quantities an expected difference is made of: each a column of the view's census
# side (sql/views/repo_params.sql), and a column `expected_<term>` of param_rules (its factor).
EXPECTED_TERMS: tuple[str, ...] = ("embedding", "largest_layer", "hidden_squared")
# The tests a rule may state that name things: language-config counts, words of the repo's config
# parts, the Hub's dtypes.
LIST_TESTS: tuple[str, ...] = ("config_counts", "config_parts", "hub_dtypes")
RULE_KEYS: tuple[str, ...] = ("cause", "tied", *LIST_TESTS, "difference", "expected")


class ParamsError(ReasonError):
    """A refusal of the parameter rules file (the vocabulary's `params` group)."""

    group = "params"


class _Rules(Loader):
    error = ParamsError


@cache
def rule_rows(path: Path = RULES_PATH) -> tuple[Mapping[str, Any], ...]:
    """The rules as param_rules rows, in the file's order (`position`), each with the file's
    tolerance; a test the rule does not state is None (the view: it holds)."""
    check = _Rules(str(path))
    content = check.mapping("", read_yaml(path, lambda reason, what: check.fail(reason, "", what)), ("tolerance", "rules"),
                            ("tolerance", "rules"))  # fmt: skip
    tolerance = content["tolerance"]
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise check.fail("bad_value", "tolerance", f"must be a share of the census count in [0, 1), got {tolerance!r}")
    rules = content["rules"]
    if not isinstance(rules, list) or not rules:
        raise check.fail("bad_value", "rules", "must be a non-empty list")
    rows = [_rule_row(check, f"rules[{i}]", rule, i, float(tolerance)) for i, rule in enumerate(rules)]
    if any(rows[-1][key] is not None for key in ("tied", *LIST_TESTS, "difference")):
        raise check.fail("bad_value", f"rules[{len(rows) - 1}]", "the last rule must state no test, so that every repo has a cause")
    return tuple(rows)


def _rule_row(check: _Rules, key: str, rule: Any, position: int, tolerance: float) -> dict[str, Any]:
    check.mapping(key, rule, RULE_KEYS, ("cause",))
    if rule["cause"] not in PARAM_CAUSES:
        raise check.fail("bad_value", f"{key}.cause", f"{rule['cause']!r} is not a cause of the vocabulary ({', '.join(PARAM_CAUSES)})")
    tied = rule.get("tied")
    if tied is not None and not isinstance(tied, bool):
        raise check.fail("bad_value", f"{key}.tied", f"must be true or false, got {tied!r}")
    lists = {name: _names(check, f"{key}.{name}", rule.get(name)) for name in LIST_TESTS}
    difference = rule.get("difference")
    if difference is not None and difference not in DIFFERENCE_TESTS:
        raise check.fail("bad_value", f"{key}.difference", f"{difference!r} is not one of {', '.join(DIFFERENCE_TESTS)}")
    expected = rule.get("expected") or {}
    check.mapping(f"{key}.expected", expected, EXPECTED_TERMS, what="term")
    for term, factor in expected.items():
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 0:
            raise check.fail("bad_value", f"{key}.expected.{term}", f"must be a finite number not below 0, got {factor!r}")
    if expected and difference not in ("equals", "at_most"):
        raise check.fail("bad_value", f"{key}.expected", "an expected difference needs `difference: equals` or `at_most`")
    if difference == "at_most" and not expected:
        raise check.fail("bad_value", f"{key}.expected", "`difference: at_most` needs the expected difference it is bounded by")
    return {
        "position": position,
        "cause": rule["cause"],
        "tied": tied,
        **lists,
        "difference": difference,
        **{f"expected_{term}": float(expected.get(term, 0)) for term in EXPECTED_TERMS},
        "tolerance": tolerance,
    }


def _names(check: _Rules, key: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise check.fail("bad_value", key, f"must be a non-empty list of names, got {value!r}")
    return list(value)
