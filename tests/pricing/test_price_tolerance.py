"""A spec the records price beyond their tolerance of what the census measured is never priced:
the night stores its spec and a `price` failure instead (catalogue/records/points.py)."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import load_shipped

from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.points import check_prices, measured_per_token, price_ends, price_points
from speccat.census import run_census

REPO = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def spec():
    return run_census(load_shipped(REPO), name=REPO, seq_length=1024, across=True).to_dict()


def with_unclaimed(spec: dict, share: float) -> dict:
    """The spec with `share` of its census-point measurement added as bytes no op claims."""
    changed = copy.deepcopy(spec)
    booked = changed["measured"]["decoder"]["bytes_per_token"]
    booked["other"] = booked.get("other", 0) + share * sum(v for op, v in booked.items() if op != "cached")
    return changed


def all_rows(spec: dict, records, grid) -> list[dict]:
    return price_points(spec, records, grid) + price_ends(spec, records, grid, load_ends(records))


def test_the_shipped_spec_is_within_the_tolerance_at_every_point(spec, records, grid):
    rows = all_rows(spec, records, grid)
    measured = measured_per_token(spec)
    # the census's own point, those across settings, and the model's three ends
    assert len(rows) == len(measured) >= 13 and {r["kind"] for r in rows} >= {"end:embedding", "end:final_norm", "end:logits"}
    assert max(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) for r in rows) < records.tolerance
    check_prices(spec, rows, records)


def test_bytes_no_record_prices_beyond_the_tolerance_refuse_the_prices(spec, records, grid):
    assert records.tolerance == 0.02
    small = with_unclaimed(spec, 0.01)  # 1% more measured: priced 1/1.01 of it, within 2%
    check_prices(small, price_points(small, records, grid), records)
    large = with_unclaimed(spec, 0.05)  # priced 1/1.05 of it: 4.8% short
    with pytest.raises(PricingError) as err:
        check_prices(large, price_points(large, records, grid), records)
    assert err.value.reason == "unsupported_layer"
    assert "kind 'decoder' at point 'census'" in str(err.value) and "-4.8%" in str(err.value)


def test_an_end_priced_beyond_the_tolerance_refuses_the_prices(spec, records, grid):
    changed = copy.deepcopy(spec)
    changed["ends"]["bytes_per_token"]["logits"] *= 1.05  # the logits kept 5% more than ends.yaml says
    with pytest.raises(PricingError) as err:
        check_prices(changed, all_rows(changed, records, grid), records)
    assert "kind 'end:logits' at point 'census'" in str(err.value) and "-4.8%" in str(err.value)


def test_the_night_stores_the_spec_and_a_price_failure_instead_of_prices(spec):
    from speccat.census.spec import ModelSpec
    from speccat.flows.analysis import analyse

    out = analyse(load_shipped(REPO), REPO, 1024, spec_json=ModelSpec(with_unclaimed(spec, 0.05)).to_json())
    assert "prices" not in out and json.loads(out["spec"])["measured"]["decoder"]["bytes_per_token"]["other"] > 0
    assert out["price_error"][0] == "unsupported_layer"
    assert "prices" in analyse(load_shipped(REPO), REPO, 1024, spec_json=ModelSpec(spec).to_json())
