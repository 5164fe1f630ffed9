"""bench/bench_hub.py's later night: 1% of the synthetic Hub's repos get a new commit, and as many
as 1% of its configs a config no night has seen. The bench once grew the vocabulary of configs
the Hub already served, which made each "new" config another repo's: its later night censused
nothing and was timed as if it had."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import bench_hub  # noqa: E402
from support.hubstandin import StandinHub  # noqa: E402
from support.synthetic_hub import synthetic_repos  # noqa: E402

from speccat.census import config_hash  # noqa: E402


def test_a_later_night_brings_new_configs_and_new_commits():
    import json

    repos, configs = synthetic_repos(3000, 200)
    hub = StandinHub(repos)
    before = {r.repo_id: (r.sha, r.files["config.json"]) for r in repos}
    served = {config_hash(c) for c in configs}

    n_changed, n_new = bench_hub.change_one_percent(hub, len(configs))
    assert (n_changed, n_new) == (30, 2)
    changed = [r for r in hub.repos.values() if r.sha != before[r.repo_id][0]]
    assert len(changed) == n_changed
    new = {config_hash(json.loads(r.files["config.json"])) for r in changed if r.files["config.json"] != before[r.repo_id][1]}
    assert len(new) == n_new and not new & served
    retrained = [r for r in changed if r.files["config.json"] == before[r.repo_id][1]]
    assert retrained and config_hash(json.loads(retrained[0].files["config.json"])) in served  # the hash leaves the dtype out
