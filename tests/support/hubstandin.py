"""A local stand-in for the few Hub HTTP endpoints huggingface_hub calls, for tests.

It listens on 127.0.0.1 (a free port) in a thread, so the real huggingface_hub client code
runs against it once HF_ENDPOINT points there:

- `GET /api/models?filter=&pipeline_tag=&sort=&limit=&expand=`: the repos whose library and
  pipeline tag match, sorted as asked, paged with a `Link: <...>; rel="next"` header, each
  item carrying only the expanded fields (as the Hub does).
- `HEAD|GET /{org}/{name}/resolve/{revision}/{file}`: the file of that commit, with the
  `X-Repo-Commit`, `ETag` and `Content-Length` headers the client relies on; the Hub's error
  codes (`X-Error-Code: RepoNotFound | GatedRepo | RevisionNotFound | EntryNotFound`) otherwise.
  A repo whose files live in LFS storage (`Repo.lfs`) answers as the Hub does for those: a 302 to
  a signed CDN URL with `X-Linked-Etag` and `X-Linked-Size`; the CDN is this server under the name
  `localhost`, another origin to the client, so huggingface_hub's HEAD stops at the 302 (it
  follows only redirects that stay on the Hub) and its GET goes to the CDN without the token.
- Sorting by `downloads`, `likes` or `lastModified`, newest first; `expand=safetensors` gives the
  Hub's parameter counts per dtype (`Repo.safetensors`).
- Rate limits (`StandinHub(limits={"api": N, "resolvers": M}, window_s=W)`): fixed windows per
  bucket (`/api/` and `/resolve/` paths, as the Hub counts them); every answer in a limited
  bucket carries `RateLimit: "bucket";r=LEFT;t=SECONDS` and `RateLimit-Policy: "fixed
  window";"bucket";q=N;w=W`, and a request past the quota is a 429 with `r=0` (huggingface_hub
  waits `t` and tries again). `hub.throttled` counts the 429s.

Faults are scripted per request: `hub.fail(method, path, status, headers)` makes the next
request with that method and path answer with the status (a queue, so a 429 then success is
one call); `hub.stall(...)` answers only after a delay (a client timeout), `hub.reset(...)`
drops the connection with a TCP reset and no answer. Every request is recorded in
`hub.requests` (method, path, time, authorization).
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit


@dataclass
class Repo:
    repo_id: str
    sha: str
    files: dict[str, bytes] = field(default_factory=dict)
    downloads: int = 0
    likes: int = 0
    library_name: str = "transformers"
    pipeline_tag: str = "text-generation"
    gated: object = False  # False, "auto" or "manual"
    access: int | None = None  # 401 or 403: the caller has no access (gated); None: open
    license: str | None = "apache-2.0"
    last_modified: str = "2026-11-01T00:00:00.000Z"
    safetensors: dict[str, int] | None = None  # the Hub's parameter counts per dtype
    lfs: bool = False  # its files are served from LFS storage: the resolver redirects to the CDN

    def item(self, expand: list[str]) -> dict:
        full = {
            "sha": self.sha,
            "gated": self.gated,
            "downloads": self.downloads,
            "likes": self.likes,
            "lastModified": self.last_modified,
            "pipeline_tag": self.pipeline_tag,
            "library_name": self.library_name,
            "tags": [self.library_name, self.pipeline_tag] + ([f"license:{self.license}"] if self.license else []),
        }
        if self.safetensors is not None:
            full["safetensors"] = {"parameters": dict(self.safetensors), "total": sum(self.safetensors.values())}
        return {"id": self.repo_id, "_id": self.repo_id, **{k: full[k] for k in expand if k in full}}


@dataclass
class Request:
    method: str
    path: str
    query: dict
    at: float
    authorization: str | None


def git_blob_sha(content: bytes) -> str:
    """The etag the Hub gives a small (non-LFS) file: its git blob sha1."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


# The listing's sort keys, as the Hub's query names them, and the Repo attribute of each.
SORT_KEYS = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified"}
CDN_PATH = "/cdn/"


def bucket_of(path: str) -> str | None:
    """The Hub's rate-limit bucket of a path: every /api/ endpoint, every /resolve/ URL."""
    if path.startswith("/api/"):
        return "api"
    if "/resolve/" in path:
        return "resolvers"
    return None


class StandinHub:
    PAGE_SIZE = 3  # small, so listing more than a few repos exercises the client's paging

    def __init__(
        self, repos: list[Repo] = (), *, page_size: int | None = None, limits: dict[str, int] | None = None,
        window_s: float = 300.0,
    ):  # fmt: skip
        self.repos: dict[str, Repo] = {r.repo_id: r for r in repos}
        self.page_size = page_size or self.PAGE_SIZE
        self.limits = dict(limits or {})
        self.window_s = window_s
        self.throttled = 0
        self._window: dict[str, tuple[float, int]] = {}  # bucket -> (its window's start, requests in it)
        self._sorted: dict[tuple, list[Repo]] = {}  # the listing's order per query, until the repos change
        self.requests: list[Request] = []
        self._faults: dict[tuple[str, str], deque] = defaultdict(deque)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="standin-hub", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        self.changed()
        return repo

    def remove(self, repo_id: str) -> None:
        del self.repos[repo_id]
        self.changed()

    def changed(self) -> None:
        """Call after changing a repo in place (its sha, lastModified, downloads): the listing's
        order is kept between requests until then."""
        with self._lock:
            self._sorted.clear()

    def cdn_url(self) -> str:
        """The CDN's origin: this server under another name (module docstring)."""
        return f"http://localhost:{self._server.server_address[1]}"

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        headers: dict | None = None,
        body: bytes = b"",
        declared_length: int | None = None,
    ) -> None:
        """The next `method path` request answers `status` (queued: call twice for two failures).

        `declared_length` announces more bytes than `body` holds and then closes the
        connection: a transfer cut short.
        """
        self._queue(method, path, (status, headers or {}, body, declared_length))

    def stall(self, method: str, path: str, seconds: float) -> None:
        """The next `method path` request is answered normally, but only after `seconds`."""
        self._queue(method, path, ("stall", seconds))

    def reset(self, method: str, path: str) -> None:
        """The next `method path` request gets no answer: the connection is reset (RST)."""
        self._queue(method, path, ("reset",))

    def _queue(self, method: str, path: str, fault: tuple) -> None:
        with self._lock:
            self._faults[(method, path)].append(fault)

    def requests_to(self, path: str, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.path == path and (method is None or r.method == method)]

    def __enter__(self) -> StandinHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- HTTP -----------------------------------------------------------------------------

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                hub._serve_quietly(self, "GET")

            def do_HEAD(self) -> None:
                hub._serve_quietly(self, "HEAD")

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:  # the connection was reset, or the client gave up waiting
                    pass

        return Handler

    def _serve_quietly(self, h: BaseHTTPRequestHandler, method: str) -> None:
        try:
            self._serve(h, method)
        except (BrokenPipeError, ConnectionResetError):  # a stalled answer the client gave up on
            h.close_connection = True

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        with self._lock:
            self.requests.append(Request(method, parts.path, query, time.monotonic(), h.headers.get("authorization")))
            limit_headers, over = self._count(bucket_of(parts.path))
            faults = None if over else self._faults.get((method, parts.path))
            fault = faults.popleft() if faults else None
        if over:
            return self._reply(h, method, 429, b"Too Many Requests", limit_headers)
        h.limit_headers = limit_headers
        if fault is not None and fault[0] == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()  # linger 0: the kernel sends RST, not FIN
            h.close_connection = True
            return None
        if fault is not None and fault[0] == "stall":
            time.sleep(fault[1])
        elif fault is not None:
            status, headers, body, declared_length = fault
            return self._reply(h, method, status, body, headers, declared_length)
        if parts.path == "/api/models":
            return self._list(h, method, query)
        if parts.path.startswith(CDN_PATH):
            return self._cdn(h, method, parts.path[len(CDN_PATH):])
        segments = parts.path.strip("/").split("/")
        if len(segments) >= 5 and segments[2] == "resolve":
            repo_id, revision, filename = "/".join(segments[:2]), segments[3], "/".join(segments[4:])
            return self._resolve(h, method, repo_id, revision, filename)
        return self._reply(h, method, 404, b"Not Found")

    def _count(self, bucket: str | None) -> tuple[dict, bool]:
        """Count a request in its bucket's window (under the lock): its RateLimit headers, and
        whether it is past the quota."""
        if bucket is None or bucket not in self.limits:
            return {}, False
        quota, now = self.limits[bucket], time.monotonic()
        start, used = self._window.get(bucket, (now, 0))
        if now - start >= self.window_s:
            start, used = start + (now - start) // self.window_s * self.window_s, 0
        over = used >= quota
        if not over:
            used += 1
        else:
            self.throttled += 1
        self._window[bucket] = (start, used)
        reset = max(0, math.ceil(start + self.window_s - now))
        headers = {
            "RateLimit": f'"{bucket}";r={quota - used};t={reset}',
            "RateLimit-Policy": f'"fixed window";"{bucket}";q={quota};w={int(self.window_s)}',
        }
        return headers, over

    def _listed(self, query: dict) -> list[Repo]:
        key = (tuple(query.get("filter", [])), tuple(query.get("pipeline_tag", [])), query.get("sort", [None])[0])
        with self._lock:
            cached = self._sorted.get(key)
        if cached is not None:
            return cached
        repos = list(self.repos.values())
        for library in query.get("filter", []):
            repos = [r for r in repos if r.library_name == library]
        for tag in query.get("pipeline_tag", []):
            repos = [r for r in repos if r.pipeline_tag == tag]
        sort = key[2]
        if sort is not None:
            attribute = SORT_KEYS[sort]
            repos.sort(key=lambda r: getattr(r, attribute), reverse=True)
        with self._lock:
            self._sorted[key] = repos
        return repos

    def _list(self, h, method: str, query: dict) -> None:
        repos = self._listed(query)
        if "limit" in query:
            repos = repos[: int(query["limit"][0])]
        offset = int(query.get("offset", ["0"])[0])
        page = repos[offset : offset + self.page_size]
        expand = query.get("expand", [])
        headers = {"Content-Type": "application/json", **h.limit_headers}
        if offset + self.page_size < len(repos):
            following = {**query, "offset": [str(offset + self.page_size)]}
            headers["Link"] = f'<{self.url}/api/models?{urlencode(following, doseq=True)}>; rel="next"'
        body = json.dumps([r.item(expand) for r in page]).encode()
        self._reply(h, method, 200, body, headers)

    def _cdn(self, h, method: str, name: str) -> None:
        """The CDN's answer for a signed URL: `{etag}?repo=...` names the content."""
        etag, _, repo_id = name.partition("/")
        repo = self.repos.get(repo_id)
        content = next((c for c in (repo.files.values() if repo else ()) if git_blob_sha(c) == etag), None)
        if content is None:
            return self._reply(h, method, 404, b"")
        self._reply(h, method, 200, content, {"ETag": f'"{etag}"', "Content-Type": "application/octet-stream"})

    def _resolve(self, h, method: str, repo_id: str, revision: str, filename: str) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._reply(h, method, 404, b"", {"X-Error-Code": "RepoNotFound"})
        if repo.access is not None:
            return self._reply(h, method, repo.access, b"", {"X-Error-Code": "GatedRepo"})
        if revision not in (repo.sha, "main"):
            return self._reply(h, method, 404, b"", {"X-Error-Code": "RevisionNotFound"})
        commit = {"X-Repo-Commit": repo.sha}
        content = repo.files.get(filename)
        if content is None:
            return self._reply(h, method, 404, b"", {"X-Error-Code": "EntryNotFound", **commit})
        etag = git_blob_sha(content)
        if repo.lfs:
            # As the Hub answers for a file in LFS storage: a redirect to the CDN, the file's
            # etag and size on headers of their own (the 302's own Content-Length is its body's).
            linked = {**commit, **h.limit_headers, "X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(content)),
                      "ETag": f'"{etag}"', "Location": f"{self.cdn_url()}{CDN_PATH}{etag}/{repo_id}"}  # fmt: skip
            return self._reply(h, method, 302, b"", linked)
        headers = {**commit, **h.limit_headers, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
        self._reply(h, method, 200, content, headers)

    @staticmethod
    def _reply(
        h, method: str, status: int, body: bytes, headers: dict | None = None, declared_length: int | None = None
    ) -> None:
        h.send_response(status)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body) if declared_length is None else declared_length))
        if declared_length is not None:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(body)


def point_huggingface_hub_at(monkeypatch, url: str, cache_dir: str) -> None:
    """What `HF_ENDPOINT=url HF_HUB_CACHE=cache_dir` does for a fresh process, for this one.

    huggingface_hub reads its environment once, at import, into `huggingface_hub.constants`;
    the suite has imported it long before, so the constants are set alongside the variables
    (child processes started by the test read the variables).
    """
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", cache_dir)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache_dir)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
