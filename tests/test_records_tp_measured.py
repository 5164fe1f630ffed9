"""Records v2 at tensor parallelism, against the census's measurement of a simulated rank.

A Megatron-style tensor-parallel rank of t ranks holds a layer whose heads, kv heads (one
replicated head when t > n_kv), dense ffn width, expert widths and linear-attention heads are
1/t of the model's; everything outside those regions (the layer's input, the norms, the
projections' inputs, the router) it holds whole when sequence parallelism is off. The census
measures such a rank by censusing the config with those fields divided, at the same hidden
size and head width. The records price the model's own spec at tp = t, sequence_parallel off:
neither reads the other, and they agree within 1% for every kind.
"""

from __future__ import annotations

import copy

import pytest
from conftest import load_shipped

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census
from speccat.census.family import family_for

TOLERANCE = 0.01
REPOS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3.5-9B", "openai/gpt-oss-20b")
SPLIT = ("intermediate_size", "moe_intermediate_size", "linear_num_key_heads", "linear_num_value_heads")


def rank_config(config: dict, t: int) -> dict:
    """The config of one of t tensor-parallel ranks (the text config, where it is nested)."""
    rank = copy.deepcopy(config)
    c = rank.get("text_config", rank)
    a = c["num_attention_heads"]
    c.setdefault("head_dim", c["hidden_size"] // a)
    c["num_attention_heads"] = a // t
    c["num_key_value_heads"] = max(c.get("num_key_value_heads", a) // t, 1)
    for field in SPLIT:
        if c.get(field):
            c[field] //= t
    return rank


def _per_token(spec, seq: int, **setting) -> dict[str, float]:
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq, **setting})])
    prices = price_layers(spec, family_for(spec["arch"]).pricing_defaults(), records, one)
    return {kind: float(prices.total[i, 0, 0]) / seq for i, kind in enumerate(prices.kinds)}


@pytest.mark.parametrize("t", [2, 8])
@pytest.mark.parametrize("repo", REPOS)
def test_a_simulated_tp_rank_is_priced_as_measured(repo, t):
    config = load_shipped(repo)
    seq = 4096
    model = run_census(config, name=repo, seq_length=seq)
    rank = run_census(rank_config(config, t), name=f"{repo} tp{t}", seq_length=seq)
    priced = _per_token(model, seq, tp=t, sequence_parallel=False)
    for kind, bytes_per_token in priced.items():
        measured = sum(rank["measured"][kind]["bytes_per_token"].values())
        assert abs(bytes_per_token / measured - 1) <= TOLERANCE, f"{kind} at tp {t}: priced {bytes_per_token:.1f}, measured {measured:.1f}"


@pytest.mark.parametrize("repo", REPOS)
def test_a_second_sequence_length_and_a_cp_rank_are_priced_as_measured(repo):
    """At 1024 tokens (the census's default is 4096: per-token, s² and constant terms would show
    as a change per token), and a context-parallel rank of cp 2 at 4096: the rank holds 2048 of
    the sequence's tokens (ring attention: its own q, k and v), so the census measures it at 2048."""
    config = load_shipped(repo)
    short = run_census(config, name=repo, seq_length=1024)
    for kind, bytes_per_token in _per_token(short, 1024).items():
        measured = sum(short["measured"][kind]["bytes_per_token"].values())
        assert abs(bytes_per_token / measured - 1) <= TOLERANCE, f"{kind} at s 1024: priced {bytes_per_token:.1f}, measured {measured:.1f}"
    model = run_census(config, name=repo, seq_length=4096)
    rank = run_census(config, name=repo, seq_length=2048)
    for kind, bytes_per_token in _per_token(model, 4096, cp=2).items():
        measured = sum(rank["measured"][kind]["bytes_per_token"].values()) * 2048 / 4096  # the rank's bytes per model token
        assert abs(bytes_per_token / measured - 1) <= TOLERANCE, f"{kind} at cp 2: priced {bytes_per_token:.1f}, measured {measured:.1f}"
