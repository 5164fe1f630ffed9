"""The Hub's parameter counts in the catalogue and their reconciliation with the census's
(repo_history/repos hub_params, hub_params_by_dtype, config_parts; the table param_rules from
catalogue/hub_params.yaml; the view repo_params).

Two nights of shipped configs censused for real (tests/support/store_runs.py), each repo listed
with the Hub's counts. Every count below is worked by hand from the config; where the Hub's
published total is a public fact it is the same number (Llama-3.1-8B-Instruct 8,030,261,248;
DeepSeek-V3 684,531,386,000, explained below to the unit). One repo per cause: agrees, tied
embeddings counted twice, a vision tower, quantized packing, extra (multi-token-prediction)
heads, and an unexplained difference, flagged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from math import ceil

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.hub_params import ParamsError, rule_rows
from speccat.catalogue.store.file import open_readonly, publish
from speccat.catalogue.store.night import StoreError

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPTQ = "acme/Llama-3.1-8B-Instruct-GPTQ"  # Llama's config plus a quantization_config: the same config_hash
QWEN = "Qwen/Qwen3-0.6B"
LLAVA = "llava-hf/llava-1.5-7b-hf"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"
GPT2 = "openai-community/gpt2"
UNCOUNTED = "acme/no-safetensors"  # weights in .bin only: the Hub counts nothing

# -- the counts, by hand ---------------------------------------------------------------------

# Llama-3.1-8B: hidden 4096, 32 layers, 32/8 heads of 128, MLP 14336, vocabulary 128256, untied.
LLAMA_EMBEDDING = 128256 * 4096  # 525,336,576, and as much again for the head
LLAMA_LAYER_LINEARS = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336  # q, o; k, v; gate, up, down
LLAMA_PARAMS = 2 * LLAMA_EMBEDDING + 32 * (LLAMA_LAYER_LINEARS + 2 * 4096) + 4096
assert LLAMA_PARAMS == 8_030_261_248  # the Hub's published total for the repo

# The same model quantized by GPTQ (4 bits, groups of 128, desc_act): each projection's weight
# packs 8 values an I32 (qweight in·out/8), its zero points too (qzeros in/128·out/8), its
# g_idx holds one I32 per input row, and its F16 scales one per group and output (in/128·out);
# the embedding, the head and the norms stay F16.
PROJECTIONS = [(4096, 4096), (4096, 1024), (4096, 1024), (4096, 4096), (4096, 14336), (4096, 14336), (14336, 4096)]
GPTQ_I32 = 32 * sum(i * o // 8 + i // 128 * o // 8 + i for i, o in PROJECTIONS)
GPTQ_F16 = 32 * sum(i // 128 * o for i, o in PROJECTIONS) + 2 * LLAMA_EMBEDDING + 32 * 2 * 4096 + 4096

# Qwen3-0.6B: hidden 1024, 28 layers, 16/8 heads of 128 (QK-norm), MLP 3072, vocabulary 151936,
# tied. Its checkpoint stores lm_head.weight beside the embedding: the Hub counts it twice.
QWEN_EMBEDDING = 151936 * 1024  # 155,582,464
QWEN_LAYER = 1024 * 2048 * 2 + 1024 * 1024 * 2 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128
QWEN_PARAMS = QWEN_EMBEDDING + 28 * QWEN_LAYER + 1024  # 596,049,920
QWEN_HUB = QWEN_PARAMS + QWEN_EMBEDDING  # 751,632,384

# llava-1.5-7b: the census's language model is Vicuna-7B (hidden 4096, 32 layers, MLP 11008,
# vocabulary 32064, untied); the Hub also counts CLIP ViT-L/14 at 336 px and the projector.
LLAVA_PARAMS = 2 * 32064 * 4096 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 4096
CLIP_LAYER = 4 * (1024 * 1024 + 1024) + (1024 * 4096 + 4096) + (4096 * 1024 + 1024) + 2 * 2 * 1024
CLIP = 3 * 14 * 14 * 1024 + 1024 + 577 * 1024 + 2 * 1024 + 24 * CLIP_LAYER + 2 * 1024  # patches, class, positions, norms
PROJECTOR = 1024 * 4096 + 4096 + 4096 * 4096 + 4096
LLAVA_TOWER = CLIP + PROJECTOR  # 324,487,168
LLAVA_HUB = LLAVA_PARAMS + LLAVA_TOWER  # 7,063,427,072

# DeepSeek-V3: hidden 7168, 3 dense layers then 58 MoE layers, MLA (q rank 1536, kv rank 512,
# 128 heads of 128 + 64 rope, values 128), 256 routed experts and 1 shared of 2048, dense MLP
# 18432, vocabulary 129280, untied; one multi-token-prediction layer (num_nextn_predict_layers).
D = 7168
DS_EMBEDDING = 129280 * D
DS_ATTENTION = D * 1536 + 1536 * 128 * 192 + D * 576 + 512 * 128 * 256 + 128 * 128 * D  # q_a, q_b, kv_a, kv_b, o
DS_NORMS = 2 * D + 1536 + 512  # the layer's two norms and MLA's latent norms
DS_MOE_LAYER = DS_ATTENTION + DS_NORMS + 257 * 3 * D * 2048 + 256 * D  # experts, the shared one, the router
DS_DENSE_LAYER = DS_ATTENTION + DS_NORMS + 3 * D * 18432
DS_PARAMS = 2 * DS_EMBEDDING + 3 * DS_DENSE_LAYER + 58 * DS_MOE_LAYER + D  # 671,026,404,352
# The checkpoint also holds: the MTP layer (a MoE layer, its own embedding and head, eh_proj of
# 2·hidden to hidden, three norms), every MoE router's score-correction bias (a buffer the census
# does not count: 256 a layer, the MTP's too), and the F32 scales of the FP8 projections, one per
# 128 × 128 block (the experts', the shared expert's, the dense MLPs' and the attention's).
MTP = DS_MOE_LAYER + 2 * DS_EMBEDDING + 2 * D * D + 3 * D
BIASES = 59 * 256


def blocks(rows: int, cols: int) -> int:
    return ceil(rows / 128) * ceil(cols / 128)


ATTENTION_BLOCKS = blocks(1536, D) + blocks(24576, 1536) + blocks(576, D) + blocks(32768, 512) + blocks(D, 16384)
SCALES = 3 * (ATTENTION_BLOCKS + 3 * blocks(18432, D)) + 59 * (ATTENTION_BLOCKS + 257 * 3 * blocks(2048, D))
DS_HUB = DS_PARAMS + MTP + BIASES + SCALES
assert DS_HUB == 684_531_386_000  # the Hub's published total for the repo, to the unit
DS_BF16 = 4 * DS_EMBEDDING + 59 * 256 * D + 2 * D * D + 62 * DS_NORMS + D + 3 * D  # embeddings and heads, routers, eh_proj, norms
DS_F32 = SCALES + BIASES

# gpt2: the census counts the token embedding (50257 × 768) and the learned position embedding
# (1024 × 768, params.embedding_extra), but the checkpoint stores each layer's causal mask too
# (attn.bias, a buffer of 1024 × 1024): not a cause the rules name.
GPT2_PARAMS = 50257 * 768 + 1024 * 768 + 12 * ((768 * 2304 + 2304) + (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768) + 4 * 768) + 2 * 768
GPT2_HUB = GPT2_PARAMS + 12 * 1024 * 1024  # 137,022,720

TOLERANCE = rule_rows()[0]["tolerance"]


def hub(item, night: int, counts: dict[str, int] | None, parts=(), **fields):
    """A repo row as the Hub lists it: its counts per dtype and their total, and the parts of its config."""
    total = None if counts is None else sum(counts.values())
    return runs.repo_row(item, sha=f"{item.repo_id}@{night}", gated=False, hub_params=total,
                         hub_params_by_dtype=counts, config_parts=list(parts), **fields)  # fmt: skip


def night_one() -> runs.NightData:
    llama, qwen, llava, deepseek, gpt2 = (runs.censused(r) for r in (LLAMA, QWEN, LLAVA, DEEPSEEK, GPT2))
    repos = [
        hub(llama, 1, {"BF16": LLAMA_PARAMS}),
        hub(llama, 1, {"F16": GPTQ_F16, "I32": GPTQ_I32}, ["quantization_config"]) | {"repo_id": GPTQ},
        hub(qwen, 1, {"BF16": QWEN_HUB}),
        hub(llava, 1, {"F16": LLAVA_HUB}, ["vision_config"]),
        hub(deepseek, 1, {"BF16": DS_BF16, "F8_E4M3": DS_HUB - DS_BF16 - DS_F32, "F32": DS_F32}, ["quantization_config"]),
        hub(gpt2, 1, {"F32": GPT2_HUB}),
        hub(qwen, 1, None) | {"repo_id": UNCOUNTED},
    ]
    return runs.make_run("night-1", [llama, qwen, llava, deepseek, gpt2], day=1, repos=repos)


def night_two() -> runs.NightData:
    """Qwen3-0.6B re-uploaded without the head's copy; the GPTQ repo's fetch fails at its known sha."""
    llama, qwen = runs.censused(LLAMA), runs.censused(QWEN)
    repos = [
        hub(llama, 1, {"BF16": LLAMA_PARAMS}),
        hub(llama, 1, {"F16": GPTQ_F16, "I32": GPTQ_I32}) | {"repo_id": GPTQ, "config_hash": None, "config_parts": None},
        hub(qwen, 2, {"BF16": QWEN_PARAMS}),
    ]
    failures = [{"repo_id": GPTQ, "stage": "fetch", "reason": "fetch_failed", "message": "503 three times"}]
    return runs.make_run("night-2", [llama, qwen], day=2, repos=repos, failures=failures, new=())


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    path = tmp_path_factory.mktemp("repo-params") / "catalogue.duckdb"
    publish(path, night_one())
    first = tmp_path_factory.mktemp("repo-params-first") / "catalogue.duckdb"
    shutil.copyfile(path, first)
    publish(path, night_two())
    return first, path


def query(path, text: str, parameters=None) -> list[tuple]:
    with contextlib.closing(open_readonly(path)) as con:
        return con.execute(text, parameters or []).fetchall()


def reconciled(path) -> dict[str, tuple]:
    rows = query(path, "SELECT repo_id, census_params, hub_params, difference, cause, expected_difference, flagged FROM repo_params")
    return {r[0]: r[1:] for r in rows}


def test_the_night_stores_each_repos_hub_counts_per_dtype_and_total(catalogue):
    first, _ = catalogue
    rows = dict((r[0], r[1:]) for r in query(first, "SELECT repo_id, hub_params, hub_params_by_dtype, config_parts FROM repo_history"))
    assert rows[LLAMA] == (8_030_261_248, {"BF16": 8_030_261_248}, [])
    assert rows[GPTQ] == (GPTQ_F16 + GPTQ_I32, {"F16": GPTQ_F16, "I32": GPTQ_I32}, ["quantization_config"])
    assert rows[DEEPSEEK][0] == 684_531_386_000 and sorted(rows[DEEPSEEK][1]) == ["BF16", "F32", "F8_E4M3"]
    assert rows[UNCOUNTED] == (None, None, [])
    # A per-dtype count reads as a map.
    assert query(first, "SELECT hub_params_by_dtype['I32'] FROM repos WHERE repo_id = ?", [GPTQ]) == [(GPTQ_I32,)]


def test_each_cause_with_its_difference_worked_by_hand(catalogue):
    first, _ = catalogue
    got = reconciled(first)
    slack = lambda params: TOLERANCE * params  # noqa: E731
    assert got[LLAMA] == (LLAMA_PARAMS, LLAMA_PARAMS, 0, "agrees", 0, False)
    assert got[QWEN] == (QWEN_PARAMS, QWEN_HUB, QWEN_EMBEDDING, "tied_embeddings", QWEN_EMBEDDING, False)
    assert got[LLAVA] == (LLAVA_PARAMS, LLAVA_HUB, LLAVA_TOWER, "modality_tower", None, False)
    # GPTQ: 8 weights an I32 leave the Hub counting about a quarter of the parameters.
    assert got[GPTQ][:4] == (LLAMA_PARAMS, GPTQ_F16 + GPTQ_I32, GPTQ_F16 + GPTQ_I32 - LLAMA_PARAMS, "quantized_packing")
    assert got[GPTQ][2] < -0.7 * LLAMA_PARAMS and not got[GPTQ][5]
    # DeepSeek-V3: the MTP layer, bounded by one largest layer, two embeddings and 2·hidden²; what
    # is beyond the bound (norms, router biases, FP8 scales) is within the tolerance.
    bound = DS_MOE_LAYER + 2 * DS_EMBEDDING + 2 * D * D
    assert got[DEEPSEEK] == (DS_PARAMS, DS_HUB, DS_HUB - DS_PARAMS, "extra_heads", bound, False)
    assert 0 < DS_HUB - DS_PARAMS - bound == 3 * D + BIASES + SCALES < slack(DS_PARAMS)
    # gpt2: the stored causal masks, no rule's cause: flagged.
    assert got[GPT2] == (GPT2_PARAMS, GPT2_HUB, 12 * 1024 * 1024, "unexplained", None, True)
    assert UNCOUNTED not in got  # the Hub counted nothing


def test_history_keeps_each_nights_counts_and_the_view_reads_the_latest(catalogue):
    _, path = catalogue
    history = query(path, "SELECT run_id, hub_params FROM repo_history WHERE repo_id = ? ORDER BY run_id", [QWEN])
    assert history == [("night-1", QWEN_HUB), ("night-2", QWEN_PARAMS)]
    got = reconciled(path)
    assert got[QWEN] == (QWEN_PARAMS, QWEN_PARAMS, 0, "agrees", 0, False)
    # A failed fetch at the known sha keeps the parts of the config fetched there.
    assert query(path, "SELECT config_parts, config_hash IS NOT NULL FROM repos WHERE repo_id = ?", [GPTQ]) == [(["quantization_config"], True)]
    assert got[GPTQ][3] == "quantized_packing"


def test_the_rules_are_the_data_files(catalogue):
    _, path = catalogue
    stored = query(path, "SELECT position, cause::VARCHAR, difference FROM param_rules ORDER BY position")
    assert stored == [(r["position"], r["cause"], r["difference"]) for r in rule_rows()]
    assert query(path, "SELECT comment FROM duckdb_columns() WHERE table_name = 'repo_params' AND column_name = 'cause'")[0][0].endswith("[code]")


def test_a_catalogue_stored_before_the_hub_counts_is_carried_over(tmp_path, catalogue):
    first, _ = catalogue
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(first, path)
    with contextlib.closing(duckdb.connect(str(path))) as con:
        for table in ("repo_history", "repos"):
            for column in ("hub_params", "hub_params_by_dtype", "config_parts"):
                con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("DROP VIEW repo_params")
        con.execute("DROP TABLE param_rules")
        before = sorted(con.execute("SELECT * FROM repo_history").fetchall())
    published = publish(path, night_two())
    assert published.rebuilt
    old = sorted(query(path, "SELECT * EXCLUDE (hub_params, hub_params_by_dtype, config_parts) FROM repo_history WHERE run_id = 'night-1'"))
    assert old == before
    assert query(path, "SELECT count(*) FROM repo_history WHERE run_id = 'night-1' AND hub_params IS NOT NULL") == [(0,)]
    got = reconciled(path)
    assert got[QWEN][3] == "agrees" and got[LLAMA][3] == "agrees"


def test_a_bad_count_is_one_line_naming_the_field():
    run = night_one()
    bad = [dict(run.repos[0], hub_params=-1)] + list(run.repos[1:])
    with pytest.raises(StoreError) as err:
        dataclasses.replace(run, repos=bad).validate()
    assert err.value.reason == "bad_run" and str(err.value).startswith("repos[0].hub_params:")
    bad = [dict(run.repos[0], hub_params_by_dtype={"BF16": "many"})] + list(run.repos[1:])
    with pytest.raises(StoreError, match=r"repos\[0\]\.hub_params_by_dtype"):
        dataclasses.replace(run, repos=bad).validate()


@pytest.mark.parametrize(
    ("text", "reason", "names"),
    [
        ("tolerance: 0.001\nrules:\n  - cause: dunno\n", "bad_value", "rules[0].cause"),
        ("tolerance: 0.001\nrules:\n  - cause: agrees\n    difference: equals\n", "bad_value", "rules[0]"),
        ("tolerance: 2\nrules:\n  - cause: unexplained\n", "bad_value", "tolerance"),
        ("tolerance: 0.001\nrules:\n  - cause: extra_heads\n    difference: at_most\n  - cause: unexplained\n", "bad_value", "rules[0].expected"),
        ("tolerance: 0.001\nrules:\n  - cause: agrees\n    colour: red\n", "unknown_key", "rules[0].colour"),
        ("tolerance: [\n", "not_yaml", "(top level)"),
    ],
)
def test_a_bad_rules_file_is_one_line_with_a_reason(tmp_path, text, reason, names):
    path = tmp_path / "hub_params.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError) as err:
        rule_rows(path)
    assert err.value.reason == reason and f": {names}:" in str(err.value) and "\n" not in str(err.value)
