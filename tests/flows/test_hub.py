"""The sources (flows/hub.py): HubSource against a local stand-in of the Hub's HTTP API, so the
real huggingface_hub client runs, and SnapshotSource against the shipped snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
from conftest import load_shipped, repo_id_of, shipped_config_paths
from huggingface_hub import constants
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at

from speccat.flows.hub import (
    FETCH_FAILED,
    GATED,
    NOT_FOUND,
    RATE_LIMITED,
    FetchError,
    HubSource,
    Listing,
    SnapshotSource,
    classify,
    make_source,
)

SHA_A = "a" * 40
SHA_B = "b" * 40


def config_bytes(repo_id: str) -> bytes:
    return json.dumps(load_shipped(repo_id), indent=2).encode()


def resolve_path(repo_id: str, sha: str) -> str:
    return f"/{repo_id}/resolve/{sha}/config.json"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A stand-in Hub with HF_ENDPOINT pointing at it and an empty cache; no token."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token file either
    with StandinHub() as standin:
        point_huggingface_hub_at(monkeypatch, standin.url, str(tmp_path / "hf-cache"))
        yield standin


def add_model(hub: StandinHub, repo_id: str, sha: str = SHA_A, **kw) -> Repo:
    return hub.add(Repo(repo_id, sha, files={"config.json": config_bytes(repo_id)}, **kw))


def listing(repo: Repo) -> Listing:
    return Listing(repo_id=repo.repo_id, source="hub", sha=repo.sha)


# -- listing ------------------------------------------------------------------------------


def test_list_keeps_transformers_text_generation_sorted_by_downloads_with_metadata(hub):
    downloads = {
        "meta-llama/Llama-3.2-1B-Instruct": 900,
        "Qwen/Qwen3-0.6B": 700,
        "google/gemma-2b": 500,
        "microsoft/phi-4": 300,
        "HuggingFaceTB/SmolLM2-135M-Instruct": 100,
    }
    for i, (repo_id, n) in enumerate(downloads.items()):
        add_model(hub, repo_id, sha=f"{i}" * 40, downloads=n, likes=n // 10, gated="manual" if i == 0 else False)
    # Two repos the filters must drop, with more downloads than any kept one.
    hub.add(Repo("org/not-transformers", "c" * 40, downloads=10_000, library_name="vllm"))
    hub.add(Repo("org/a-classifier", "d" * 40, downloads=10_000, pipeline_tag="text-classification"))

    listed = HubSource().list(limit=4)  # 4 > the stand-in's page size: the client pages

    # Expected: the five models ordered by their downloads, cut at the limit.
    expected_order = sorted(downloads, key=downloads.get, reverse=True)[:4]
    assert [x.repo_id for x in listed] == expected_order
    first = listed[0]
    repo = hub.repos[first.repo_id]
    assert first == Listing(
        repo_id=repo.repo_id,
        source="hub",
        sha=repo.sha,
        last_modified="2026-11-01T00:00:00+00:00",
        downloads=900,
        likes=90,
        gated="manual",
        license="apache-2.0",
        pipeline_tag="text-generation",
    )
    assert listed[1].gated is False
    assert len(hub.requests_to("/api/models")) == 2  # two pages of three
    query = hub.requests_to("/api/models")[0].query
    assert query["filter"] == ["transformers"]
    assert query["pipeline_tag"] == ["text-generation"]
    assert query["sort"] == ["downloads"]
    assert {"sha", "gated", "downloads", "likes", "lastModified", "tags"} <= set(query["expand"])


def test_list_retries_a_rate_limited_page(hub):
    add_model(hub, "Qwen/Qwen3-0.6B")
    hub.fail("GET", "/api/models", 429, {"Retry-After": "1"})
    assert [x.repo_id for x in HubSource().list(limit=5)] == ["Qwen/Qwen3-0.6B"]
    first, second = hub.requests_to("/api/models")
    assert second.at - first.at >= 1.0  # waited as the Hub asked


# -- the pinned download ------------------------------------------------------------------


def test_fetch_is_pinned_to_the_listed_sha_and_served_from_the_cache_after(hub, monkeypatch):
    repo = add_model(hub, "Qwen/Qwen3-0.6B", sha=SHA_A)
    path = HubSource().fetch(listing(repo))
    assert path.read_bytes() == repo.files["config.json"]
    assert path.parent.name == SHA_A  # the cache's snapshot folder of that commit
    assert {r.path for r in hub.requests} == {resolve_path(repo.repo_id, SHA_A)}

    before = len(hub.requests)
    assert HubSource().fetch(listing(repo)) == path
    assert len(hub.requests) == before  # a pinned file already cached costs no request

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert HubSource().fetch(listing(repo)) == path  # offline: served from the cache


def test_a_new_sha_is_downloaded_again(hub):
    repo = add_model(hub, "Qwen/Qwen3-0.6B", sha=SHA_A)
    old = HubSource().fetch(listing(repo))
    repo.sha = SHA_B
    repo.files["config.json"] = repo.files["config.json"].replace(b'"hidden_size": 1024', b'"hidden_size": 2048')
    new = HubSource().fetch(listing(repo))
    assert new.parent.name == SHA_B and old.parent.name == SHA_A
    assert json.loads(new.read_bytes())["hidden_size"] == 2048
    assert json.loads(old.read_bytes())["hidden_size"] == 1024


def test_offline_and_not_cached_is_a_fetch_failure(hub, monkeypatch):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(listing(repo))
    assert (caught.value.reason, caught.value.transient) == (FETCH_FAILED, False)
    assert hub.requests == []


def test_the_token_comes_from_the_environment(hub, monkeypatch):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    monkeypatch.setenv("HF_TOKEN", "hf_standin_secret")
    HubSource().list(limit=1)
    HubSource().fetch(listing(repo))
    assert {r.authorization for r in hub.requests} == {"Bearer hf_standin_secret"}


# -- transient errors ---------------------------------------------------------------------


def test_429_with_retry_after_on_the_metadata_request_then_stored(hub):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    path = resolve_path(repo.repo_id, repo.sha)
    # huggingface_hub's first metadata request does not retry; its second one backs off as
    # the Hub asks. So two 429s: the wait shows between the second and the third request.
    hub.fail("HEAD", path, 429, {"Retry-After": "1"})
    hub.fail("HEAD", path, 429, {"Retry-After": "1"})
    assert HubSource().fetch(listing(repo)).read_bytes() == repo.files["config.json"]
    heads = hub.requests_to(path, "HEAD")
    assert len(heads) == 3
    assert heads[2].at - heads[1].at >= 1.0


def test_429_with_retry_after_on_the_download_then_stored(hub):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    path = resolve_path(repo.repo_id, repo.sha)
    hub.fail("GET", path, 429, {"Retry-After": "1"})
    assert HubSource().fetch(listing(repo)).read_bytes() == repo.files["config.json"]
    first, second = hub.requests_to(path, "GET")
    assert second.at - first.at >= 1.0


def test_503_on_the_metadata_request_then_stored(hub):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    path = resolve_path(repo.repo_id, repo.sha)
    hub.fail("HEAD", path, 503)
    assert HubSource().fetch(listing(repo)).read_bytes() == repo.files["config.json"]
    assert len(hub.requests_to(path, "HEAD")) == 2


def test_503_on_the_download_is_transient_and_the_next_try_stores(hub):
    # huggingface_hub does not retry a 5xx on the download itself: the source says the
    # failure is transient, which is what the flow's task retries on (tests/flows/test_refresh_hub.py).
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    hub.fail("GET", resolve_path(repo.repo_id, repo.sha), 503)
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(listing(repo))
    assert (caught.value.reason, caught.value.transient) == (FETCH_FAILED, True)
    assert HubSource().fetch(listing(repo)).read_bytes() == repo.files["config.json"]


def test_a_transfer_cut_short_is_resumed_and_stored(hub):
    repo = add_model(hub, "Qwen/Qwen3-0.6B")
    content = repo.files["config.json"]
    path = resolve_path(repo.repo_id, repo.sha)
    hub.fail("GET", path, 200, {"X-Repo-Commit": repo.sha}, body=content[: len(content) // 2], declared_length=len(content))
    assert HubSource().fetch(listing(repo)).read_bytes() == content
    assert len(hub.requests_to(path, "GET")) == 2


# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_a_gated_repo_is_a_gated_failure(hub, status):
    repo = add_model(hub, "meta-llama/Llama-3.2-1B-Instruct", gated="manual", access=status)
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(listing(repo))
    assert (caught.value.reason, caught.value.transient) == (GATED, False)
    assert repo.repo_id in str(caught.value)


def test_a_repo_without_config_is_not_found(hub):
    repo = hub.add(Repo("org/no-config", SHA_A, files={"README.md": b"hi"}))
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(listing(repo))
    assert (caught.value.reason, caught.value.transient) == (NOT_FOUND, False)
    assert "config.json" in str(caught.value)


def test_a_missing_repo_and_a_missing_revision_are_not_found(hub):
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(Listing(repo_id="org/gone", source="hub", sha=SHA_A))
    assert caught.value.reason == NOT_FOUND
    repo = add_model(hub, "Qwen/Qwen3-0.6B", sha=SHA_A)
    with pytest.raises(FetchError) as caught:
        HubSource().fetch(Listing(repo_id=repo.repo_id, source="hub", sha=SHA_B))
    assert caught.value.reason == NOT_FOUND


def test_a_truncated_json_body_is_fetched_as_served(hub):
    # The Hub serving a config that is not valid JSON is not a transport error: the file is
    # stored as served, and the flow's parse step turns it into a bad_json failures row.
    content = config_bytes("Qwen/Qwen3-0.6B")
    repo = hub.add(Repo("org/truncated", SHA_A, files={"config.json": content[: len(content) // 2]}))
    assert HubSource().fetch(listing(repo)).read_bytes() == content[: len(content) // 2]


def test_classify_transport_errors_as_transient_and_keeps_fetch_errors():
    request = httpx2.Request("GET", "http://127.0.0.1/x")
    for err in (httpx2.ReadTimeout("slow", request=request), httpx2.ConnectError("refused", request=request)):
        mapped = classify(err, "org/x")
        assert (mapped.reason, mapped.transient) == (FETCH_FAILED, True)
        assert mapped.args[0].startswith("org/x: ")
    wrapped = OSError("outer")
    wrapped.__cause__ = httpx2.ReadTimeout("slow", request=request)
    assert classify(wrapped, "org/x").transient
    keep = FetchError(RATE_LIMITED, "org/x: rate limited", transient=True)
    assert classify(keep, "org/x") is keep
    assert classify(ValueError("odd"), "org/x").transient is False


def test_fetch_errors_survive_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(FetchError(RATE_LIMITED, "org/x: rate limited", transient=True)))
    assert (err.reason, str(err), err.transient) == (RATE_LIMITED, "org/x: rate limited", True)
    with pytest.raises(ValueError, match="unknown FetchError reason"):
        FetchError("nope", "x")


# -- the snapshot -------------------------------------------------------------------------


def test_snapshot_lists_every_shipped_config_as_an_honest_snapshot_row():
    listed = SnapshotSource().list()
    assert [x.repo_id for x in listed] == [repo_id_of(p) for p in shipped_config_paths()]
    for row in listed:
        assert row.source == "snapshot"
        assert (row.sha, row.downloads, row.likes, row.license, row.last_modified, row.gated) == (None,) * 6
    assert len(SnapshotSource().list(limit=3)) == 3


def test_snapshot_fetch_gives_the_shipped_file(tmp_path):
    paths = shipped_config_paths()
    source = SnapshotSource()
    first = source.list(limit=1)[0]
    assert source.fetch(first) == paths[0]
    with pytest.raises(FetchError) as caught:
        source.fetch(Listing(repo_id="org/absent", source="snapshot"))
    assert caught.value.reason == NOT_FOUND


def test_snapshot_reads_another_folder_laid_out_the_same_way(tmp_path):
    folder = tmp_path / "org__model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (tmp_path / "not-a-model").mkdir()
    source = make_source("snapshot", snapshot_dir=tmp_path)
    assert [x.repo_id for x in source.list()] == ["org/model"]
    assert source.fetch(source.list()[0]) == Path(folder / "config.json")
    with pytest.raises(FetchError, match="no snapshot folder"):
        make_source("snapshot", snapshot_dir=tmp_path / "absent").list()
    with pytest.raises(ValueError, match="unknown source"):
        make_source("ftp")
