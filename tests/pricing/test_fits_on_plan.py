"""The questions of the table fits_on (catalogue/records/fits_on.py) and the layouts it tries
(candidates.py `leading`): every layout that can rank first in `speccat fit`, at a setting the
grid prices, and none fit would never list first."""

from __future__ import annotations

from speccat.catalogue.records.candidates import arrangements, layouts, leading
from speccat.catalogue.records.cost import load_accelerators
from speccat.catalogue.records.fits_on import load_questions, plan_rows
from speccat.catalogue.records.schedules import load_schedules
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.records.states import load_states


def test_the_plan_tries_every_leading_layout_at_every_stack_and_length():
    grid, states, accelerators = load_settings(), load_states(), load_accelerators()
    questions = load_questions()
    node = accelerators["H100-SXM"].node
    assert accelerators["H100-SXM"].default and node == 8
    plan = plan_rows(questions, grid, states, accelerators, load_schedules())
    assert [r["gpu_mem_gib"] for r in plan["fits_on_sizes"]] == [24, 40, 48, 80, 96, 141, 192]
    assert {r["recipe"] for r in plan["fits_on_sizes"]} == {"megatron_bf16_adam"}
    assert questions.gpus == tuple(2**k for k in range(11))
    by_id = {s["setting_id"]: s for s in grid.settings}
    for gpus in questions.gpus:
        tried = {(r["position"], r["dp"], r["tp"], r["pp"], r["cp"], r["ep"], r["zero"], by_id[r["setting_id"]]["stack"],
                  by_id[r["setting_id"]]["seq_length"]) for r in plan["fits_on_layouts"] if r["gpus"] == gpus}  # fmt: skip
        expected = {(i, lay.dp, lay.tp, lay.pp, lay.cp, lay.ep, lay.zero, stack, seq)
                    for i, lay in enumerate(leading(gpus, node, 3))
                    for stack in ("transformers", "megatron") for seq in (4096, 8192, 32768)}  # fmt: skip
        assert tried == expected, gpus  # none left out for lack of a grid setting: the grid holds tp and cp up to a node
    settings = {r["setting_id"] for r in plan["fits_on_layouts"]}
    assert all(by_id[s]["micro_batch"] == 1 and by_id[s]["in_flight"] == 1 for s in settings)


def test_leading_keeps_ep_1_at_the_highest_zero_stage_in_fits_order():
    every = arrangements(64, (0, 1, 2, 3), 8)
    lead = leading(64, 8, 3)
    assert all(lay.ep == 1 and lay.zero == (3 if lay.dp * lay.cp > 1 else 0) for lay in lead)
    # one per (tp, pp, cp) of 64 ranks with tp, cp <= 8: 4 x 7 x 4 = 112 of them fit 64 ranks
    assert len(lead) == len({(lay.tp, lay.pp, lay.cp) for lay in every}) == 4 * 4 * 7 - sum(
        1 for tp in (1, 2, 4, 8) for cp in (1, 2, 4, 8) for pp in (1, 2, 4, 8, 16, 32, 64) if 64 % (tp * pp * cp))
    # in the order fit numbers its layouts: a subsequence of every arrangement
    positions = [every.index(lay) for lay in lead]
    assert positions == sorted(positions)
    # a model's own layouts (Mixtral: 8 experts, 32 layers, 32 heads) are every arrangement it can have, in the same order
    mixtral = {"num_attention_heads": 32, "layers": [{"count": 32}], "num_experts": 8}
    own = layouts(64, mixtral, {}, (0, 1, 2, 3), 8)
    assert own == [lay for lay in every if lay.pp <= 32 and 8 % lay.ep == 0]
    assert {lay.ep for lay in own} == {1, 2, 4, 8}


def test_bad_questions_are_refused_naming_the_file_and_key(tmp_path):
    import pytest

    from speccat.catalogue.errors import ReasonError
    from speccat.catalogue.records.fits_on import FITS_ON_PATH

    text = FITS_ON_PATH.read_text()
    for bad, key, words in [
        (text.replace("gpus: [1, 2, 4,", "gpus: [1, 1, 4,"), "gpus", "holds a value twice"),
        (text.replace("{size: 40,  ", "{size: 0,  "), "gpu_mem_gib", "whole numbers >= 1"),
        (text.replace("{size: 48,  accelerators:", "{size: 48,  accelerator:"), "gpu_mem_gib[2].accelerator", "unknown key"),
    ]:
        path = tmp_path / "fits_on.yaml"
        path.write_text(bad)
        with pytest.raises(ReasonError) as err:
            load_questions.__wrapped__(path)
        assert f"fits_on.yaml: {key}" in str(err.value) and words in str(err.value), str(err.value)
