

def test_across_settings_the_cross_attention_kind_is_measured_recomputed_given_encoder_tokens_and_priced_as_measured():
    """With `across`, each switch set is recomputed given encoder tokens too (the first count),
    and the records price every such point as the census measured it."""
    spec = run_census(TINY, name="tiny-mllama", seq_length=S, across=True).to_dict()
    records, grid = load_records(), load_settings()
    rows = price_points(spec, family_for("mllama").pricing_defaults(), records, grid)
    measured = measured_per_token(spec)
    recomputed = [p for p in spec["measured_at"] if p["point"].startswith(f"encoder {S // 2} recompute ")]
    assert {tuple(p["recompute"]) for p in recomputed} >= {("softmax",), ("normOp",), tuple(records.switches)}
    assert all(p["encoder_tokens"] == S // 2 and set(p["bytes_per_token"]) == {"cross_dense"} for p in recomputed)
    cross = [r for r in rows if r["kind"] == "cross_dense" and r["point"].startswith("encoder ")]
    assert len(cross) == 2 + len(recomputed)
    for row in cross:
        assert abs(row["priced_per_token"] / measured[row["kind"], row["point"]] - 1) < 1e-9, row
    everything = next(p for p in recomputed if p["point"].endswith(" all"))["bytes_per_token"]["cross_dense"]
    plain = next(p for p in spec["measured_at"] if p["point"] == f"encoder {S // 2}")["bytes_per_token"]["cross_dense"]
    assert 0 < sum(everything.values()) - everything["cached"] < sum(plain.values())
    check_prices(spec, rows, records)
