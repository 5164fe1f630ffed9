"""Nights that store the Hub's parameter counts and reconcile them with the census's (issue 30,
item 4): against the stand-in Hub, which serves `safetensors` (counts per dtype and a total) in
its listing as the Hub does.

Two nights over one catalogue: a top-N night (`--scope top`, the listing by downloads) and then a
`--scope all` crawl, which lists every repo again and fetches only the one whose sha changed.
Every repo is SmolLM2-135M's config (tied embeddings), some with what the config_hash leaves out
(a vision_config, a quantization_config) or one count more (num_nextn_predict_layers), each
listed with the counts its checkpoint would have, worked by hand below; one cause each.
"""

from __future__ import annotations

import json

import pytest
from conftest import load_shipped
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at
from support.refresh_runs import rows, run_refresh
from support.synthetic_hub import change

pytestmark = pytest.mark.slow

SMOL = load_shipped("HuggingFaceTB/SmolLM2-135M-Instruct")
# SmolLM2-135M: hidden 576, 30 layers, 9 heads and 3 kv heads of 64, MLP 1536, vocabulary 49152, tied.
EMBEDDING = 49152 * 576  # 28,311,552
PROJECTIONS = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]  # q k v o gate up down (in, out)
LAYER = sum(i * o for i, o in PROJECTIONS) + 2 * 576  # 3,540,096: the projections and two norms
PARAMS = EMBEDDING + 30 * LAYER + 576  # 134,515,008
# A ViT-B/16 at 224 px: patches, class token, 197 positions, pre- and post-norm, 12 layers.
VIT_LAYER = 4 * (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768) + 2 * 2 * 768
TOWER = 3 * 16 * 16 * 768 + 768 + 197 * 768 + 2 * 768 + 12 * VIT_LAYER + 2 * 768  # 85,798,656
# GPTQ, 4 bits in groups of 64: qweight in·out/8 and qzeros in/64·out/8 and g_idx (in) as I32,
# the scales (in/64·out) F16, with the embedding (tied: stored once) and the norms.
GPTQ_I32 = 30 * sum(i * o // 8 + i // 64 * o // 8 + i for i, o in PROJECTIONS)
GPTQ_F16 = 30 * sum(i // 64 * o for i, o in PROJECTIONS) + EMBEDDING + 30 * 2 * 576 + 576
# One multi-token-prediction layer as DeepSeek stores it: a decoder layer, its own embedding and
# head, a projection of 2·hidden to hidden and three norms.
MTP = LAYER + 2 * EMBEDDING + 2 * 576 * 576 + 3 * 576

REPOS = {  # repo_id -> (config, the Hub's counts per dtype or None, the cause tonight)
    "org/smol": (SMOL, {"BF16": PARAMS}, "agrees"),
    "org/smol-head-copy": (SMOL, {"BF16": PARAMS + EMBEDDING}, "tied_embeddings"),
    "org/smol-vision": ({**SMOL, "vision_config": {"model_type": "clip_vision_model", "hidden_size": 768}},
                        {"F32": TOWER, "BF16": PARAMS}, "modality_tower"),
    "org/smol-gptq": ({**SMOL, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 64}},
                      {"I32": GPTQ_I32, "F16": GPTQ_F16}, "quantized_packing"),
    "org/smol-mtp": ({**SMOL, "num_nextn_predict_layers": 1}, {"BF16": PARAMS + MTP}, "extra_heads"),
    "org/smol-mismatched": (SMOL, {"BF16": PARAMS * 5 // 4}, "unexplained"),
    "org/smol-bin": (SMOL, None, None),  # pytorch_model.bin only: the Hub counts nothing
}
FIXED = "org/smol-head-copy"  # re-uploaded before the second night without the head's copy


@pytest.fixture(scope="module")
def nights(prefect_api, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub-params")
    with pytest.MonkeyPatch.context() as monkeypatch, StandinHub() as hub:
        monkeypatch.setenv("HF_TOKEN", "hf_params_token")
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp / "hf-cache"))
        for i, (repo_id, (config, counts, _)) in enumerate(REPOS.items()):
            hub.add(Repo(repo_id, f"{i + 1:040x}", files={"config.json": json.dumps(config).encode()},
                         downloads=1000 - i, safetensors=counts))  # fmt: skip
        db = tmp / "catalogue.duckdb"
        top = run_refresh(source="hub", limit=len(REPOS), db=str(db), retry_delays=[0.1], report=False)
        change(hub, [FIXED], 100)
        hub.repos[FIXED].safetensors = {"BF16": PARAMS}
        crawl = run_refresh(source="hub", scope="all", db=str(db), retry_delays=[0.1], report=False)
        yield db, top, crawl


def test_the_top_night_stores_each_repos_counts_and_the_parts_of_its_config(nights):
    db, (state, counts), _ = nights
    assert state.is_completed() and counts["failures"] == {}
    stored = {r[0]: r[1:] for r in rows(db, "SELECT repo_id, hub_params, hub_params_by_dtype, config_parts FROM repo_history "
                                            "WHERE run_id = ?", [counts["run_id"]])}  # fmt: skip
    for repo_id, (config, by_dtype, _) in REPOS.items():
        total = None if by_dtype is None else sum(by_dtype.values())
        # SmolLM2's config also holds transformers.js's settings, another part the census leaves out
        parts = sorted({"transformers.js_config"} | {k for k in ("vision_config", "quantization_config") if k in config})
        assert stored[repo_id] == (total, by_dtype, parts), repo_id


def test_each_repo_has_its_cause_with_the_difference_worked_by_hand(nights):
    db, _, _ = nights
    got = {r[0]: r[1:] for r in rows(db, "SELECT repo_id, census_params, difference, cause, expected_difference, flagged FROM repo_params")}
    assert got["org/smol"] == (PARAMS, 0, "agrees", 0, False)
    assert got["org/smol-vision"] == (PARAMS, TOWER, "modality_tower", None, False)
    assert got["org/smol-gptq"][:3] == (PARAMS, GPTQ_I32 + GPTQ_F16 - PARAMS, "quantized_packing")
    # The bound: one largest layer, two embeddings and 2·hidden²; the three norms are within the tolerance.
    assert got["org/smol-mtp"] == (PARAMS, MTP, "extra_heads", LAYER + 2 * EMBEDDING + 2 * 576 * 576, False)
    assert got["org/smol-mismatched"] == (PARAMS, PARAMS * 5 // 4 - PARAMS, "unexplained", None, True)
    assert "org/smol-bin" not in got


def test_the_crawl_keeps_history_and_the_parts_of_configs_it_did_not_fetch(nights):
    db, (_, top), (state, crawl) = nights
    assert state.is_completed()
    assert crawl["crawl"]["n_fetched"] == 1 and crawl["crawl"]["n_unchanged"] == len(REPOS) - 1
    history = rows(db, "SELECT run_id = ?, hub_params FROM repo_history WHERE repo_id = ? ORDER BY 1 DESC", [top["run_id"], FIXED])
    assert history == [(True, PARAMS + EMBEDDING), (False, PARAMS)]
    # Unchanged repos were not fetched tonight: their rows hold no parts, repos keeps those of their sha.
    assert rows(db, "SELECT count(*) FROM repo_history WHERE run_id = ? AND config_parts IS NULL", [crawl["run_id"]]) == [(len(REPOS) - 1,)]
    assert rows(db, "SELECT config_parts FROM repos WHERE repo_id = 'org/smol-vision'") == [(["transformers.js_config", "vision_config"],)]
    causes = dict(rows(db, "SELECT repo_id, cause FROM repo_params"))
    assert causes == {r: c for r, (_, _, c) in REPOS.items() if c is not None} | {FIXED: "agrees"}
