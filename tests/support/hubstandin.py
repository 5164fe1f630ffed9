"""A local stand-in for the few Hub HTTP endpoints huggingface_hub calls, for tests.

It listens on 127.0.0.1 (a free port) in a thread, so the real huggingface_hub client code
runs against it once HF_ENDPOINT points there:

- `GET /api/models?filter=&pipeline_tag=&sort=&limit=&expand=`: the repos whose library and
  pipeline tag match, sorted as asked, paged with a `Link: <...>; rel="next"` header, each
  item carrying only the expanded fields (as the Hub does).
- `HEAD|GET /{org}/{name}/resolve/{revision}/{file}`: the file of that commit, with the
  `X-Repo-Commit`, `ETag` and `Content-Length` headers the client relies on; the Hub's error
  codes (`X-Error-Code: RepoNotFound | GatedRepo | RevisionNotFound | EntryNotFound`) otherwise.

Faults are scripted per request: `hub.fail(method, path, status, headers)` makes the next
request with that method and path answer with the status (a queue, so a 429 then success is
one call); `hub.stall(...)` answers only after a delay (a client timeout), `hub.reset(...)`
drops the connection with a TCP reset and no answer. Every request is recorded in
`hub.requests` (method, path, time, authorization).
"""

from __future__ import annotations

import hashlib
import json
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


class StandinHub:
    PAGE_SIZE = 3  # small, so listing more than a few repos exercises the client's paging

    def __init__(self, repos: list[Repo] = ()):
        self.repos: dict[str, Repo] = {r.repo_id: r for r in repos}
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
        return repo

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
            faults = self._faults.get((method, parts.path))
            fault = faults.popleft() if faults else None
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
        segments = parts.path.strip("/").split("/")
        if len(segments) >= 5 and segments[2] == "resolve":
            repo_id, revision, filename = "/".join(segments[:2]), segments[3], "/".join(segments[4:])
            return self._resolve(h, method, repo_id, revision, filename)
        return self._reply(h, method, 404, b"Not Found")

    def _list(self, h, method: str, query: dict) -> None:
        repos = list(self.repos.values())
        for library in query.get("filter", []):
            repos = [r for r in repos if r.library_name == library]
        for tag in query.get("pipeline_tag", []):
            repos = [r for r in repos if r.pipeline_tag == tag]
        sort = query.get("sort", [None])[0]
        if sort is not None:
            repos.sort(key=lambda r: getattr(r, sort), reverse=True)
        if "limit" in query:
            repos = repos[: int(query["limit"][0])]
        offset = int(query.get("offset", ["0"])[0])
        page = repos[offset : offset + self.PAGE_SIZE]
        expand = query.get("expand", [])
        headers = {"Content-Type": "application/json"}
        if offset + self.PAGE_SIZE < len(repos):
            following = {**query, "offset": [str(offset + self.PAGE_SIZE)]}
            headers["Link"] = f'<{self.url}/api/models?{urlencode(following, doseq=True)}>; rel="next"'
        body = json.dumps([r.item(expand) for r in page]).encode()
        self._reply(h, method, 200, body, headers)

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
        headers = {**commit, "ETag": f'"{git_blob_sha(content)}"', "Content-Type": "application/octet-stream"}
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
