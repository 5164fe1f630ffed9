"""Flags, not bitmasks (catalogue/records/flags.yaml, flags.py, the view frontier_flags). Each
mapping is held to what the framework's flag recomputes by a source outside the records:
Megatron's core_attn is Korthikanti et al.'s selective recompute, checked against their Table 2
in tests/pricing/test_records_stacks.py (which reads the mapping from flags.yaml); a
full-recompute flag keeps each layer's input and nothing else, worked by hand here; a flag
said to be beyond every switch set drops a save the records book to an op no switch drops."""

from __future__ import annotations

import re

import duckdb
import pytest
import yaml
from support import store_runs

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records.flags import FLAGS_PATH, flag_rows, load_flags
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.shared import shared_content
from speccat.catalogue.store.file import publish

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def switches() -> tuple[str, ...]:
    return tuple(load_records().switches)


def test_every_framework_states_its_version_source_and_stack(switches):
    frameworks, _ = load_flags(switches)
    assert {fw.name for fw in frameworks} == {"megatron", "transformers", "torchtitan"}
    assert all(fw.version and fw.source and fw.stack in ("megatron", "transformers") for fw in frameworks)
    megatron = next(fw for fw in frameworks if fw.name == "megatron")
    # every choice of TransformerConfig.recompute_modules is named, mapped or said to be beyond
    assert {f.name for f in megatron.flags} >= {"core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts"}
    records = load_records()
    rows = flag_rows(frameworks, records)
    sets = {(r["framework"], r["mask"]): r["command"] for r in rows["flag_sets"]}
    assert sets[("megatron", records.mask_of(["softmax", "headCast"]))] == "--recompute-granularity selective --recompute-modules core_attn"
    assert sets[("megatron", -1)] == "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    assert sets[("torchtitan", -1)] == "--activation_checkpoint.mode full"
    assert ("transformers", -1) in sets and len(sets) == 4


def test_a_flag_beyond_every_set_drops_a_save_no_switch_drops(switches):
    """Where a reason names the records' ops whose saves the flag drops too, each is an op no
    switch drops (catalogue/shared.yaml: switch null), so no switch set is what the flag does;
    Megatron's output-discarding norm and MoE activation drop the next linear layer's input."""
    ops = shared_content()["ops"]
    kept_by_every_set = {op for op, body in ops.items() if body["switch"] is None}
    frameworks, _ = load_flags(switches)
    named = {}
    for fw in frameworks:
        for flag in fw.flags:
            if flag.beyond:
                named[(fw.name, flag.name)] = {op for op in ops if re.search(rf"\b{op}\b", flag.beyond)}
    assert all(ops_named <= kept_by_every_set for ops_named in named.values()), named
    assert named[("megatron", "layernorm")] == {"attMM", "ffMM"} and named[("megatron", "moe_act")] == {"ffMM"}


def test_a_full_recompute_flag_keeps_each_layers_input_only(tmp_path):
    """Megatron's full recompute, transformers' gradient checkpointing and torchtitan's full
    mode keep each layer's input, the bf16 residual stream, split over tp by sequence
    parallelism: 2·h/t bytes a token (Llama-3.1-8B: h 4096)."""
    db = tmp_path / "catalogue.duckdb"
    publish(db, store_runs.make_run("night", [store_runs.censused(LLAMA)]))
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT g.stack, g.tp, f.kept / (g.seq_length * g.micro_batch) FROM full_prices AS f JOIN settings AS g USING (setting_id) "
            "WHERE g.cp = 1 ORDER BY ALL").fetchall()  # fmt: skip
        assert rows and all(per_token == 2 * 4096 / tp for _, tp, per_token in rows)
        full = con.execute("SELECT stack, list(DISTINCT framework ORDER BY framework) FROM flag_sets WHERE mask = -1 GROUP BY ALL ORDER BY ALL").fetchall()
        assert full == [("megatron", ["megatron"]), ("transformers", ["torchtitan", "transformers"])]
        # the frontier's full-recompute rows name every framework's flag for their stack
        named = con.execute(
            "SELECT DISTINCT stack, list_sort([f.framework FOR f IN flags]) FROM frontier_flags WHERE repo_id = ? AND mask = -1 ORDER BY ALL", [LLAMA]
        ).fetchall()
        assert named == [("megatron", ["megatron"]), ("transformers", ["torchtitan", "transformers"])]
        # with flash attention, core_attn's set (the softmax and head casts) saves only the log-sum-exp
        # and re-runs the kernel: it is off the frontier, so no frontier class is given by it
        assert con.execute("SELECT count(*) FROM frontier_flags WHERE list_contains([f.command FOR f IN flags], "
                           "'--recompute-granularity selective --recompute-modules core_attn')").fetchone() == (0,)  # fmt: skip
        lonely = con.execute("SELECT switch_set, torch_recompute_ops FROM frontier_flags WHERE repo_id = ? AND stack = 'transformers' "
                             "AND no_framework AND mask > 0 ORDER BY kept_bytes DESC LIMIT 1", [LLAMA]).fetchone()  # fmt: skip
        assert lonely is not None and sorted(lonely[0].split(",")) == lonely[1]  # a set no framework gives, and the ops a torch policy recomputes


@pytest.mark.parametrize(
    "flag, reason, words",
    [
        ({"switches": ["nosuch"]}, "unknown_switch", "'nosuch'"),
        ({"switches": ["softmax"], "full": True, "command": "x"}, "bad_value", "exactly one of switches, full or beyond"),
        ({"full": True}, "missing_key", "needs the command"),
        ({"beyond": ""}, "bad_value", "non-empty string"),
    ],
)
def test_a_bad_flag_is_refused_naming_the_file_and_flag(tmp_path, switches, flag, reason, words):
    data = yaml.safe_load(FLAGS_PATH.read_text())
    data["frameworks"]["megatron"]["flags"]["bad"] = flag
    path = tmp_path / "flags.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ReasonError) as err:
        load_flags(switches, path)
    assert err.value.reason == reason and "flags.yaml: frameworks.megatron.flags.bad" in str(err.value) and words in str(err.value)
