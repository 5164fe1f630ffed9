"""The records' price of a layer's backward working set (records.yaml `working_set`,
catalogue/records/working.py) at settings the census did not run: worked here by hand from the
widths the census states, and against a real layer's peak at another sequence length.

A Llama layer's working set at its peak (in the MLP's backward) is the gradient it receives (h
wide) and two gradients of the MLP's width (down_proj's input gradient, then the activation's
and up_proj's, less down_proj's freed input). One rank holds the first split over the sequence
with sequence parallelism (whole without it) and the others split over the tensor-parallel
ranks. Qwen3-30B-A3B's is in its experts' backward: three tensors of the routed slots (top-k × h
per token), the router's weights' gradient (top-k) less its indices (int64), and the gradient
received; the routed slots grow with the dropless factor.
"""

from __future__ import annotations

import pytest
from support.layer_peaks import real_peak
from support.shipped_specs import shipped_spec
from support.tiny_models import S, tiny_config

from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_spec
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.records.working import price_working_sets
from speccat.census import run_census

LLAMA, QWEN_MOE, MAMBA = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "ArthurZ/mamba-130m"
SEQ = 8192


def working(spec: dict, **fields) -> float:
    """The records' working set of the spec's one kind at the grid's default setting with `fields`."""
    grid = load_settings()
    setting = grid.setting(fields)
    (kind,) = spec["measured"]
    return float(price_working_sets(spec, load_records(), grid.with_settings([setting]), (kind,))[0, 0])


def stated(spec: dict) -> dict[tuple[int, str], int]:
    (m,) = spec["measured"].values()
    return {(w, dtype): n for w, dtype, n in m["working_set"]["widths"]}


def test_a_dense_layers_working_set_by_hand():
    spec = shipped_spec(LLAMA).to_dict()
    h, ffn = spec["hidden_size"], spec["intermediate_size"]
    assert stated(spec) == {(h, "compute"): 1, (ffn, "compute"): 2}
    for stack in ("transformers", "megatron"):
        for tp in (1, 2, 8):
            for sp in (True, False):
                by_hand = SEQ * (h * 2 / (tp if sp else 1) + 2 * ffn * 2 / tp)
                assert working(spec, stack=stack, seq_length=SEQ, tp=tp, sequence_parallel=sp) == by_hand, (stack, tp, sp)
    # cp splits the tokens; the compute dtype sets the bytes; a micro-batch of 2 holds twice
    assert working(spec, seq_length=SEQ, tp=1, cp=4) == SEQ / 4 * (h + 2 * ffn) * 2
    assert working(spec, seq_length=SEQ, tp=1, cp=1, dtype="fp32") == SEQ * (h + 2 * ffn) * 4
    assert working(spec, seq_length=SEQ, tp=1, cp=1, micro_batch=2) == 2 * SEQ * (h + 2 * ffn) * 2
    # in flight is what the layer keeps for later micro-batches, never the working set: one layer's at a time
    assert working(spec, seq_length=SEQ, tp=1, cp=1, in_flight=4) == SEQ * (h + 2 * ffn) * 2


def test_routed_experts_working_set_by_hand():
    spec = shipped_spec(QWEN_MOE).to_dict()
    h, k = spec["hidden_size"], spec["num_experts_per_tok"]
    assert stated(spec) == {(h, "compute"): 1, (k * h, "compute"): 3, (k, "compute"): 1, (k, "int64"): -1}
    for tp in (1, 4):
        for factor in (1, 1.5, 2):
            routed = 3 * k * factor * h * 2 / tp
            router = (k * 2 - k * 8) / tp  # the weights' gradient formed, the indices freed: split over the sequence
            by_hand = SEQ * (h * 2 / tp + routed + router)
            got = working(spec, stack="megatron", seq_length=SEQ, tp=tp, sequence_parallel=True, dropless_tok_factor=factor)
            assert got == pytest.approx(by_hand, rel=1e-12), (tp, factor)


def test_a_width_no_class_holds_is_priced_whole_where_formed_and_split_where_freed():
    spec = shipped_spec(MAMBA).to_dict()
    h, di = spec["hidden_size"], spec["ssm_inner_size"]
    widths = stated(spec)
    matched = {h, di, 2 * di}  # the hidden stream's, the mixer's inner width, in_proj's output
    assert matched <= {w for w, _ in widths} and {w for w, _ in widths} - matched  # the x_proj output, the dt rank: no class's
    (m,) = spec["measured"].values()
    size = {"compute": 2, "float32": 4, "int64": 8, "bool": 1}
    for tp in (2, 4):  # megatron splits the mixer's inner width over tp; the hidden stream over the sequence
        by_hand = m["working_set"]["constant_bytes"] + SEQ * sum(
            n * w * size[dtype] * (1 / tp if w in matched else (1 if n > 0 else 1 / tp)) for (w, dtype), n in widths.items()
        )
        assert working(spec, stack="megatron", seq_length=SEQ, tp=tp) == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("seq", [S // 2, 2 * S])
def test_priced_at_another_length_is_the_real_layers_peak_there(seq):
    """The census at S; the price at `seq` against a real layer run at `seq`."""
    config = {**tiny_config(LLAMA), "intermediate_size": 256}
    spec = run_census(config, name="tiny", seq_length=S).to_dict()
    assert working(spec, seq_length=seq, tp=1, cp=1) == real_peak(config, seq=seq)


def test_the_census_point_prices_what_it_measured_and_an_old_spec_is_unpriced():
    spec = shipped_spec(LLAMA).to_dict()
    (m,) = spec["measured"].values()
    assert working(spec, seq_length=m["seq_length"], tp=1, cp=1, sequence_parallel=False) == m["backward_peak"]
    for entry in spec["measured"].values():
        del entry["working_set"]  # a spec of census version 17
    grid = load_settings()
    tables = price_spec(spec, load_records(), grid.with_settings([grid.setting({})]))
    assert tables.full_prices["backward_peak"].null_count == 1 and tables.full_prices["kept"].null_count == 0


def test_a_dtype_the_records_do_not_know_is_refused():
    spec = shipped_spec(LLAMA).to_dict()
    (m,) = spec["measured"].values()
    m["working_set"]["widths"].append([64, "quint4x2", 1])
    with pytest.raises(PricingError, match="quint4x2") as err:
        working(spec, seq_length=SEQ)
    assert err.value.reason == "bad_value"
