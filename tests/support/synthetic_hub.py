"""A synthetic Hub for the stand-in (tests/support/hubstandin.py): N repos over M distinct configs,
built from the configs the project ships (flows/snapshot/*/config.json).

Config k is shipped config `k % S` (S shipped) with its vocabulary grown by `64 * (k // S)` tokens
(a tokenizer variant: another config_hash); k < S is the shipped config itself. Shipped configs
that share a config_hash (DeepSeek-V3 and R1, Qwen2 and Qwen2.5 7B) stay one config each, so 5,000
variants of the 50 shipped configs are 4,800 distinct config_hashes. Repo r is a
fine-tune of config `r % M`, uploaded in one of three dtypes (`torch_dtype`, which the config_hash
leaves out: the same config), with a sha, a lastModified one minute after repo r - 1's, downloads
falling with r, and the Hub's safetensors parameter counts for its dtype (a plain estimate from
the config: embeddings, attention and MLP; the stand-in's, not the census's). One repo in
`gated_every` is gated (manual) and refuses the caller (403), one in `lfs_every` serves its
config from LFS storage (a 302 to the CDN). The file bytes are made once per (config, dtype)
and shared, so 200,000 repos build in seconds.

`change(hub, repo_ids, at)` is a new commit of each (a new sha and lastModified, its config
unchanged or the one given), as a night's changes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from support.hubstandin import Repo, StandinHub

SNAPSHOT = Path(__file__).resolve().parents[2] / "flows" / "snapshot"
DTYPES = ("bfloat16", "float16", "float32")
SAFETENSORS_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def shipped_configs(snapshot: Path = SNAPSHOT) -> list[tuple[str, dict]]:
    """(repo_id, config) of every shipped config, by repo id."""
    return [
        (path.parent.name.replace("__", "/", 1), json.loads(path.read_text()))
        for path in sorted(snapshot.glob("*/config.json"))
    ]


def variant(config: dict, k: int, n_shipped: int) -> dict:
    """Config k (module docstring): the shipped config with a vocabulary 64 * (k // n_shipped) larger."""
    grow = 64 * (k // n_shipped)
    if not grow:
        return config
    text = config.get("text_config")
    if isinstance(text, dict):  # a multimodal config: the language model's vocabulary is its text_config's
        vocab = int(text.get("vocab_size") or config.get("vocab_size") or 256000)
        return {**config, "text_config": {**text, "vocab_size": vocab + grow}}
    return {**config, "vocab_size": int(config.get("vocab_size") or 32000) + grow}


def estimated_parameters(config: dict) -> int:
    """A plain estimate of a decoder's parameters from its config (embeddings, attention, MLP)."""
    c = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    hidden = int(c.get("hidden_size") or c.get("n_embd") or c.get("d_model") or 1024)
    layers = int(c.get("num_hidden_layers") or c.get("n_layer") or c.get("num_layers") or 12)
    inner = int(c.get("intermediate_size") or c.get("n_inner") or 4 * hidden)
    vocab = int(c.get("vocab_size") or 32000)
    tied = bool(c.get("tie_word_embeddings", config.get("tie_word_embeddings", True)))
    return vocab * hidden * (1 if tied else 2) + layers * (4 * hidden * hidden + 3 * hidden * inner)


def sha_of(r: int, commit: int = 0) -> str:
    return hashlib.sha1(f"{r}:{commit}".encode()).hexdigest()


def when(minutes: float) -> str:
    """A lastModified as the Hub writes it, `minutes` after START."""
    return (START + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def synthetic_repos(
    n_repos: int, n_configs: int, *, gated_every: int = 0, lfs_every: int = 0, snapshot: Path = SNAPSHOT
) -> tuple[list[Repo], list[dict]]:
    """(repos, configs): `n_repos` repos over `n_configs` distinct configs (module docstring)."""
    shipped = shipped_configs(snapshot)
    configs = [variant(shipped[k % len(shipped)][1], k, len(shipped)) for k in range(n_configs)]
    params = [estimated_parameters(c) for c in configs]
    files: dict[tuple[int, str], bytes] = {}
    repos = []
    for r in range(n_repos):
        k, dtype = r % n_configs, DTYPES[(r // n_configs) % len(DTYPES)]
        content = files.get((k, dtype))
        if content is None:
            content = files[(k, dtype)] = json.dumps({**configs[k], "torch_dtype": dtype}).encode()
        base = shipped[k % len(shipped)][0].split("/", 1)[1]
        gated = bool(gated_every) and r % gated_every == gated_every - 1
        repos.append(
            Repo(
                f"org{r % 997}/{base}-ft{r}", sha_of(r), files={"config.json": content},
                downloads=n_repos - r, likes=(n_repos - r) // 100, last_modified=when(r),
                gated="manual" if gated else False, access=403 if gated else None,
                safetensors={SAFETENSORS_DTYPE[dtype]: params[k]},
                lfs=bool(lfs_every) and r % lfs_every == lfs_every - 1,
            )
        )  # fmt: skip
    return repos, configs


def synthetic_hub(n_repos: int, n_configs: int, **kwargs) -> StandinHub:
    """A stand-in Hub serving `synthetic_repos` (StandinHub's keywords: page_size, limits, window_s)."""
    options = {k: kwargs.pop(k) for k in ("page_size", "limits", "window_s") if k in kwargs}
    repos, _ = synthetic_repos(n_repos, n_configs, **kwargs)
    return StandinHub(repos, **options)


def change(hub: StandinHub, repo_ids, at: float, config: dict | None = None) -> None:
    """A new commit of each repo at `at` minutes after START: a new sha and lastModified, and
    `config` as its config.json when given."""
    for repo_id in repo_ids:
        repo = hub.repos[repo_id]
        repo.sha = hashlib.sha1(f"{repo.sha}:next".encode()).hexdigest()
        repo.last_modified = when(at)
        if config is not None:
            repo.files = {**repo.files, "config.json": json.dumps(config).encode()}
    hub.changed()
