"""The view rank_fits and the macro rank_stages it reads (whole-rank memory for every model at
once, in SQL: the one home of the planner's rules, which `speccat fit` reads too) against
figures worked here from the pricing's per-layer prices (pricing.py, ends.py, cost.py): every
stage's activations and ends, the fullest stage, for a dense model, an MoE one under expert
parallelism and a tied small one, over several layouts; the model states by hand for one
layout (tests/pricing/test_states.py works them for others); the first stage's recompute time
on a named accelerator; and fit's own rows, priced in memory, equal to the view's."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from support import store_runs as runs

from speccat.catalogue.records.cost import load_accelerators, load_costs, op_costs, recomputed
from speccat.catalogue.records.ends import load_ends, price_ends_at
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.working import price_working_sets
from speccat.catalogue.store.file import open_readonly, publish
from speccat.flows.fit_engine import fits

REPOS = ("meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen3-0.6B")
SEQ, TP = 4096, 2
LAYOUTS = (
    dict(dp=1, pp=1, ep=1, zero=0, vpp=1),
    dict(dp=4, pp=2, ep=1, zero=3, vpp=1),
    dict(dp=2, pp=4, ep=2, zero=1, vpp=2),
    dict(dp=8, pp=3, ep=8, zero=2, vpp=1),
)
MASKS = (0, 37, 255, -1)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    path = tmp_path_factory.mktemp("rank") / "catalogue.duckdb"
    publish(path, runs.make_run("rank", [runs.censused(r) for r in REPOS]))
    with contextlib.closing(open_readonly(path)) as con:
        yield con


def split(spec, pp: int) -> list[dict[str, int]]:
    """Layers of each kind on each stage, by hand: the stack in order, earlier stages one more."""
    stack = [g["kind"] for g in spec["layers"] for _ in range(g["count"])]
    base, extra = divmod(len(stack), pp)
    bounds = [i * base + min(i, extra) for i in range(pp + 1)]
    return [{k: stack[bounds[i] : bounds[i + 1]].count(k) for k in set(stack[bounds[i] : bounds[i + 1]])} for i in range(pp)]


def by_hand(item, lay: dict, mask: int) -> list[dict]:
    """Each stage's activations and ends of `lay` at (SEQ, TP) for `mask`, from the per-layer
    prices: layers × their kind's price, and the ends where they sit, × micro-batches in flight
    (pp − i in 1F1B, × 1 + (pp − 1)/(pp·vpp) interleaved); and on the last stage the eager
    loss's working set, once: the fp32 gradients of the log-probabilities and of the logits,
    2 · s · V · 4 / tp (tests/pricing/test_loss_kernels.py measures it on a real head); what
    one layer's backward remakes, the largest of the stage's kinds: its price with nothing
    recomputed less its price under the mask, all of it under full recompute; what it holds
    beyond its saves, that and its working set (the pricing's), the largest of the stage's
    kinds; and the head's tensors of one micro-batch (final norm and logits) on the last stage,
    which a layer's backward no longer holds."""
    spec, records, grid = item.spec, runs.records(), runs.grid()
    setting = grid.setting({"stack": "transformers", "seq_length": SEQ, "tp": TP, "cp": 1})
    prices = price_layers(spec, records, grid.with_settings([setting]))
    kept = {k: float(prices.full[i, 0] if mask == -1 else prices.total[i, 0, mask]) for i, k in enumerate(prices.kinds)}
    none = {k: float(prices.total[i, 0, 0]) for i, k in enumerate(prices.kinds)}
    remade = {k: none[k] - (0 if mask == -1 else kept[k]) for k in kept}
    working = price_working_sets(spec, records, grid.with_settings([setting]), prices.kinds)
    backward = {k: remade[k] + float(working[i, 0]) for i, k in enumerate(prices.kinds)}
    ends = price_ends_at(spec, records, setting, grid.dtype_bytes, load_ends(records))
    pp, vpp = lay["pp"], lay["vpp"]
    out = []
    for i, counts in enumerate(split(spec, pp)):
        flight = (pp - i) * (1 + (pp - 1) / (pp * vpp) if vpp > 1 else 1)
        end = (ends["embedding"] if i == 0 else 0) + (ends["final_norm"] + ends["logits"] if i == pp - 1 else 0)
        working = 2 * SEQ * spec["vocab_size"] * 4 / TP if i == pp - 1 else 0
        out.append({"activations": sum(n * kept[k] for k, n in counts.items()) * flight, "ends": end * flight, "working": working,
                    "remade": max(remade[k] for k in counts), "backward": max(backward[k] for k in counts),
                    "head": ends["final_norm"] + ends["logits"] if i == pp - 1 else 0})
    return out


@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda lay: "-".join(f"{k}{v}" for k, v in lay.items()))
def test_the_view_equals_the_figures_by_hand(con, lay):
    for name in ("dp", "pp", "ep", "zero", "vpp"):
        con.execute(f"SET VARIABLE {name} = {lay[name]}")
    where = "stack = 'transformers' AND seq_length_tokens = ? AND tp_ranks = ? AND cp_ranks = 1 AND mask IN ?"
    rows = con.execute(
        f"SELECT repo_id, mask, fullest_stage, activation_bytes, ends_bytes, loss_working_bytes, remade_bytes, backward_bytes, weight_bytes, grad_bytes, "
        f"optimizer_bytes, total_bytes FROM rank_fits WHERE {where}", [SEQ, TP, list(MASKS)],
    ).fetchall()  # fmt: skip
    stages = con.execute(
        f"SELECT repo_id, mask, stage, activation_bytes, ends_bytes, loss_working_bytes, remade_bytes, backward_bytes, total_bytes FROM rank_stages('rank_fits_layout') "
        f"WHERE {where} "
        f"ORDER BY stage", [SEQ, TP, list(MASKS)],
    ).fetchall()  # fmt: skip
    got = {(r[0], r[1]): r[2:] for r in rows}
    expected_repos = {r for r in REPOS if runs.censused(r).spec.get("num_experts", 1) % lay["ep"] == 0}  # ep divides the experts
    assert {repo for repo, _ in got} == expected_repos
    for repo in expected_repos:
        for mask in MASKS:
            want = by_hand(runs.censused(repo), lay, mask)
            each = [s[2:] for s in stages if s[:2] == (repo, mask)]
            assert [s[0] for s in each] == list(range(lay["pp"])), (repo, mask)
            for (_, act, ends, working, remade, backward, _), w in zip(each, want):
                assert (act, ends, working, remade, backward) == pytest.approx(
                    (w["activations"], w["ends"], w["working"], w["remade"], w["backward"]), rel=1e-9), (repo, mask)
            fullest = max(range(len(each)), key=lambda i: (each[i][6], -i))  # the most held, the first of equals
            stage, act, ends, working, remade, backward, weight, grad, optimizer, total = got[(repo, mask)]
            assert (stage, act, ends, working, remade, backward, total) == (fullest, *each[fullest][1:]), (repo, mask)
            assert backward > remade  # every kind's working set is priced
            # the loss's moment and a layer's backward never meet: the larger of the two, the
            # head's tensors of the micro-batch freed by the layer's
            head = want[fullest]["head"]
            assert total == pytest.approx(act + ends + max(working, backward - head) + weight + grad + optimizer, rel=1e-12)


def test_megatron_18_bytes_per_parameter_by_hand(con):
    """Megatron's 18 bytes per parameter at tp 8: weights 2, gradients 4, optimizer 12, the
    optimizer sharded over dp under ZeRO 1 (the distributed optimizer), worked here for the
    dense Llama-3.1-8B at pp 1: every parameter on one stage, projections split over tp."""
    for name, value in dict(dp=4, pp=1, ep=1, zero=1, vpp=1).items():
        con.execute(f"SET VARIABLE {name} = {value}")
    item = runs.censused("meta-llama/Llama-3.1-8B-Instruct")
    params, kinds = item.spec["params"], item.spec["params"]["kinds"]
    (kind,) = kinds
    layers = item.spec["num_hidden_layers"]
    split = params["embedding"] + params["output"] + layers * (kinds[kind]["attention"] + kinds[kind]["ffn_dense"])
    whole = params["final_norm"] + layers * kinds[kind]["norm"]
    per_rank = split / TP + whole
    weight, grad, optimizer = con.execute(
        "SELECT weight_bytes, grad_bytes, optimizer_bytes FROM rank_fits WHERE repo_id = ? AND mask = 0 AND stack = 'transformers' "
        "AND seq_length_tokens = ? AND tp_ranks = ? AND cp_ranks = 1", [item.repo_id, SEQ, TP]
    ).fetchone()  # fmt: skip
    assert (weight, grad, optimizer) == pytest.approx((2 * per_rank, 4 * per_rank, 12 * per_rank / 4), rel=1e-12)


def test_a_budget_and_a_recipe_are_variables(con):
    for name, value in dict(dp=1, pp=1, ep=1, zero=0, vpp=1).items():
        con.execute(f"SET VARIABLE {name} = {value}")
    con.execute("SET VARIABLE recipe = 'zero_mixed_adam'")
    con.execute("SET VARIABLE budget_gib = 40")
    try:
        rows = con.execute(
            "SELECT grad_bytes, weight_bytes, budget_bytes, fits, total_bytes FROM rank_fits WHERE repo_id = 'Qwen/Qwen3-0.6B' AND mask = 0"
        ).fetchall()
    finally:
        con.execute("RESET VARIABLE recipe")
        con.execute("RESET VARIABLE budget_gib")
    assert rows and all(g == w for g, w, *_ in rows)  # the ZeRO paper's mixed precision: 2 bytes of gradient as of weight
    assert all(b == 40 * 2**30 and f == (t <= b) for _, _, b, f, t in rows)


def test_the_repo_id_variable_reads_one_repo_and_changes_none_of_its_rows(con):
    for name, value in dict(dp=2, pp=2, ep=1, zero=1, vpp=1).items():
        con.execute(f"SET VARIABLE {name} = {value}")
    query = "SELECT * FROM rank_fits WHERE repo_id = 'Qwen/Qwen3-0.6B' ORDER BY setting_id, mask"
    every = con.execute(query).fetchall()
    con.execute("SET VARIABLE repo_id = 'Qwen/Qwen3-0.6B'")
    try:
        one = con.execute(query).fetchall()
        repos = {r for (r,) in con.execute("SELECT DISTINCT repo_id FROM rank_fits").fetchall()}
    finally:
        con.execute("RESET VARIABLE repo_id")
    assert every and one == every and repos == {"Qwen/Qwen3-0.6B"}


def recompute_by_hand(item, pp: int, mask: int, accelerator) -> tuple[float, float]:
    """The first stage's recompute seconds per micro-batch of `mask` at (SEQ, TP) and its share
    of the same layers' step, from cost.py's per-op costs: each op max(FLOPs/peak, bytes/bandwidth)."""
    spec, records, grid = item.spec, runs.records(), runs.grid()
    sub = grid.with_settings([grid.setting({"stack": "transformers", "seq_length": SEQ, "tp": TP, "cp": 1})])
    costs = load_costs(records)
    oc = op_costs(spec, records, sub, costs)
    per_op = accelerator.seconds(oc.flops, oc.moved)[:, 0, :]  # [kind, op]
    chosen = np.ones(len(oc.ops), dtype=bool) if mask == -1 else recomputed(records, oc.ops)[mask]
    first = split(spec, pp)[0]
    seconds = sum(n * per_op[oc.kinds.index(k)][chosen].sum() for k, n in first.items())
    step = costs.step_factor * sum(n * per_op[oc.kinds.index(k)].sum() for k, n in first.items())
    return float(seconds), float(seconds / step)


@pytest.mark.parametrize("accelerator", ("H100-SXM", "MI300X"))
def test_the_views_recompute_time_is_the_first_stages_op_by_op(con, accelerator):
    """recompute_s, overhead_pct and recompute_s_per_seq against cost.py's op costs on the
    named accelerator (the default one when the variable is unset), for masks that re-run
    matmuls only, element-wise ops only, both, and full recompute."""
    lay = dict(dp=2, pp=4, ep=1, zero=1, vpp=2)
    for name, value in lay.items():
        con.execute(f"SET VARIABLE {name} = {value}")
    accelerators = load_accelerators()
    if accelerators[accelerator].default:
        con.execute("RESET VARIABLE accelerator")
    else:
        con.execute(f"SET VARIABLE accelerator = '{accelerator}'")
    try:
        rows = con.execute(
            "SELECT repo_id, mask, accelerator, recompute_s, overhead_pct, recompute_s_per_seq FROM rank_fits "
            "WHERE stack = 'transformers' AND seq_length_tokens = ? AND tp_ranks = ? AND cp_ranks = 1 AND mask IN ?",
            [SEQ, TP, list(MASKS)],
        ).fetchall()
    finally:
        con.execute("RESET VARIABLE accelerator")
    assert {r[0] for r in rows} == set(REPOS)
    for repo, mask, name, seconds, overhead, per_seq in rows:
        want, share = recompute_by_hand(runs.censused(repo), lay["pp"], mask, accelerators[accelerator])
        assert name == accelerator
        assert (seconds, overhead, per_seq) == pytest.approx((want, 100 * share, want / lay["dp"]), rel=1e-9), (repo, mask)
        assert (seconds > 0) == (mask != 0)  # mask 0 re-runs nothing


def test_the_view_ranks_as_speccat_fit_does(con):
    """Every (layout, set) `speccat fit` lists for Llama-3.1-8B on 8 GPUs at one layout (priced
    in memory at exactly that setting) has the published view's total and recompute time."""
    item = runs.censused("meta-llama/Llama-3.1-8B-Instruct")
    accelerator = next(name for name, a in load_accelerators().items() if a.default)
    listed = fits(item.spec, item.repo_id, accelerator, gpus=8, seq=SEQ, budget=80 * 2**30,
                  fixed={"dp": 2, "tp": TP, "pp": 2, "cp": 1, "ep": 1}, zeros=(1,), setting={"stack": "transformers"})  # fmt: skip
    assert listed
    for name, value in dict(dp=2, pp=2, ep=1, zero=1, vpp=1).items():
        con.execute(f"SET VARIABLE {name} = {value}")
    for f in listed:
        total, seconds, per_seq = con.execute(
            "SELECT total_bytes, recompute_s, recompute_s_per_seq FROM rank_fits WHERE repo_id = ? AND mask = ? AND stack = 'transformers' "
            "AND seq_length_tokens = ? AND tp_ranks = ? AND cp_ranks = 1", [item.repo_id, f.mask, SEQ, TP]
        ).fetchone()  # fmt: skip
        assert (total, seconds, per_seq) == pytest.approx((f.total, f.recompute_s, f.recompute_s_per_seq), rel=1e-9), f.switch_set
