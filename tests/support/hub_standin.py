"""A loopback stand-in for the Hugging Face Hub's dataset API (and the model API's repo info and
file downloads, for hub tokenizers), so hub tests never touch the network.

It serves snapshots of local directories as dataset repositories through the endpoints that
`huggingface_hub` and `datasets` call to resolve a dataset and read its files: repo info, tree
listings (paginated, recursive or not), and file downloads with HEAD and `Range`. Every commit is
kept, so a URL pinned to an old sha still reads the old bytes after `main` has moved on.

The `hub` fixture starts one for a test and points both libraries at it; it also fails the test
if either library called an endpoint the stand-in does not emulate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# Small, so that tests exercise the pagination the real Hub applies at 1000 entries.
TREE_PAGE_SIZE = 3

_REPO = r"(?P<repo>[^/]+/[^/]+)"
_ROUTES = [
    ("GET", re.compile(rf"/api/datasets/{_REPO}(?:/revision/(?P<rev>[^/]+))?"), "_info"),
    ("GET", re.compile(rf"/api/datasets/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?"), "_tree"),
    ("GET", re.compile(rf"/datasets/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), "_resolve"),
    ("HEAD", re.compile(rf"/datasets/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), "_resolve"),
    # Model repos share the namespace here: a tokenizer test commits its files like a dataset's.
    ("GET", re.compile(rf"/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?"), "_info"),
    ("GET", re.compile(rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), "_resolve"),
    ("HEAD", re.compile(rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), "_resolve"),
]


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    files: dict[str, bytes]

    def directories(self) -> set[str]:
        return {"/".join(p.split("/")[:i]) for p in self.files for i in range(1, p.count("/") + 1)}


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int


class _Reply(Exception):
    """An error response the Hub would give, with the `X-Error-Code` its clients dispatch on."""

    def __init__(self, status: int, error_code: str | None, message: str):
        super().__init__(message)
        self.status, self.error_code, self.message = status, error_code, message


class HubStandIn:
    """Dataset repositories in memory, served on 127.0.0.1 while started."""

    def __init__(self) -> None:
        self._history: dict[str, list[Commit]] = {}
        self._gated: dict[str, str] = {}
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.unhandled: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    # --- what tests call ---

    def commit(self, repo_id: str, directory: str) -> str:
        """Snapshot `directory` as the new `main` of `repo_id`; returns the commit sha."""
        files = {
            path.relative_to(directory).as_posix(): path.read_bytes()
            for path in pathlib.Path(directory).rglob("*")
            if path.is_file()
        }
        with self._lock:
            history = self._history.setdefault(repo_id, [])
            digest = hashlib.sha1(repo_id.encode())
            digest.update((history[-1].sha if history else "").encode())
            for path in sorted(files):
                digest.update(f"{path}\0{_git_blob_id(files[path])}\0".encode())
            history.append(Commit(digest.hexdigest(), files))
            return history[-1].sha

    def gate(self, repo_id: str, token: str) -> None:
        """Downloads from `repo_id` need `token`, as for a gated repo the user was granted."""
        self._gated[repo_id] = token

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the stand-in is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll keeps `stop` quick: `shutdown` waits for the loop to notice.
        serve = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        serve.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- the emulated Hub ---

    def _commit_at(self, repo_id: str, revision: str) -> Commit:
        history = self._history.get(repo_id)
        if history is None:
            raise _Reply(HTTPStatus.UNAUTHORIZED, "RepoNotFound", "Repository not found")
        if revision == "main":
            return history[-1]
        for commit in history:
            if commit.sha == revision:
                return commit
        raise _Reply(HTTPStatus.NOT_FOUND, "RevisionNotFound", f"Invalid rev id: {revision}")

    def _entry(self, commit: Commit, path: str) -> dict:
        if path in commit.files:
            data = commit.files[path]
            return {"type": "file", "oid": _git_blob_id(data), "size": len(data), "path": path}
        if path in commit.directories():
            oid = hashlib.sha1(f"{commit.sha}\0{path}".encode()).hexdigest()
            return {"type": "directory", "oid": oid, "size": 0, "path": path}
        raise _Reply(
            HTTPStatus.NOT_FOUND, "EntryNotFound", f"{path} does not exist at {commit.sha}"
        )

    def _info(self, handler: _Handler, repo: str, rev: str | None) -> None:
        commit = self._commit_at(repo, rev or "main")
        handler.send_json(
            {
                "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
                "id": repo,
                "sha": commit.sha,
                "private": False,
                "gated": "auto" if repo in self._gated else False,
                "disabled": False,
                "lastModified": "2024-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(commit.files)],
            }
        )

    def _tree(self, handler: _Handler, repo: str, rev: str, path: str | None) -> None:
        commit = self._commit_at(repo, rev)
        prefix = f"{path}/" if path else ""
        if path and path not in commit.directories():
            raise _Reply(
                HTTPStatus.NOT_FOUND, "EntryNotFound", f"{path} is not a directory at {commit.sha}"
            )
        recursive = handler.query.get("recursive", ["false"])[0] == "true"
        below = sorted(p for p in [*commit.files, *commit.directories()] if p.startswith(prefix))
        if not recursive:
            below = [p for p in below if "/" not in p[len(prefix) :]]
        start = int(handler.query.get("cursor", ["0"])[0])
        page = [self._entry(commit, p) for p in below[start : start + TREE_PAGE_SIZE]]
        headers = {}
        if start + TREE_PAGE_SIZE < len(below):
            query = {k: v[0] for k, v in handler.query.items()} | {
                "cursor": str(start + TREE_PAGE_SIZE)
            }
            url = f"{self.endpoint}{handler.path.split('?')[0]}?{urllib.parse.urlencode(query)}"
            headers["Link"] = f'<{url}>; rel="next"'
        handler.send_json(page, headers)

    def _resolve(self, handler: _Handler, repo: str, rev: str, path: str) -> None:
        commit = self._commit_at(repo, rev)
        token = self._gated.get(repo)
        if token is not None and handler.headers.get("Authorization") != f"Bearer {token}":
            raise _Reply(
                HTTPStatus.UNAUTHORIZED, "GatedRepo", f"Access to dataset {repo} is restricted."
            )
        if path not in commit.files:
            raise _Reply(
                HTTPStatus.NOT_FOUND, "EntryNotFound", f"{path} does not exist at {commit.sha}"
            )
        data = commit.files[path]
        headers = {
            "X-Repo-Commit": commit.sha,
            "ETag": f'"{_git_blob_id(data)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        status = HTTPStatus.OK
        requested = handler.headers.get("Range")
        if requested:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", requested)
            assert match, f"unexpected Range header {requested!r}"
            start = int(match[1])
            end = min(int(match[2]) + 1 if match[2] else len(data), len(data))
            if start >= len(data):
                raise _Reply(
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    None,
                    f"{path} has {len(data)} bytes",
                )
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            status, data = HTTPStatus.PARTIAL_CONTENT, data[start:end]
        handler.send(status, data, headers)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubStandIn

    def log_message(self, format: str, *args) -> None:
        pass

    @property
    def query(self) -> dict[str, list[str]]:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)

    def send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        sent = 0
        if self.command != "HEAD":
            self.wfile.write(body)
            sent = len(body)
        self.hub.requests.append(
            Request(self.command, self.path, self.headers.get("Range"), status, sent)
        )

    def send_json(self, value: object, headers: dict[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", **(headers or {})}
        self.send(HTTPStatus.OK, json.dumps(value).encode(), headers)

    def _dispatch(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        for method, pattern, handler_name in _ROUTES:
            match = pattern.fullmatch(path)
            if method == self.command and match:
                args = {
                    k: urllib.parse.unquote(v) if v else v for k, v in match.groupdict().items()
                }
                try:
                    getattr(self.hub, handler_name)(self, **args)
                except _Reply as reply:
                    headers = {"X-Error-Message": reply.message}
                    if reply.error_code:
                        headers["X-Error-Code"] = reply.error_code
                    body = json.dumps({"error": reply.message}).encode()
                    self.send(reply.status, body, {"Content-Type": "application/json", **headers})
                return
        self.hub.unhandled.append(f"{self.command} {self.path}")
        self.send(HTTPStatus.NOT_FOUND, b"not emulated")

    do_GET = do_HEAD = do_POST = _dispatch


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Iterator[HubStandIn]:
    """A started stand-in that `huggingface_hub` and `datasets` talk to, with a fresh cache.

    Both libraries read their settings from the environment once, at import, so the fixture sets
    the variables (for code that reads them later) and the module constants already derived. Any
    attempt to look up a host other than the loopback fails, and fails the test.
    """
    import datasets.config
    import huggingface_hub
    import huggingface_hub.constants as constants

    standin = HubStandIn()
    standin.start()
    lookup = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost"):
            standin.unhandled.append(f"a lookup of {host}")
            raise OSError(f"hub tests reach only the loopback stand-in (asked for {host})")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    home = str(tmp_path / "hf_home")
    settings = {
        "HF_ENDPOINT": standin.endpoint,
        "HF_HOME": home,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_UPDATE_DOWNLOAD_COUNTS": "0",  # else `datasets` pings S3 for every dataset it resolves
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "ENDPOINT": standin.endpoint,
        "HUGGINGFACE_CO_URL_TEMPLATE": standin.endpoint
        + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": home,
        "HF_HUB_CACHE": os.path.join(home, "hub"),
        "HF_XET_CACHE": os.path.join(home, "xet"),
        "HF_TOKEN_PATH": os.path.join(home, "token"),
        "HF_STORED_TOKENS_PATH": os.path.join(home, "stored_tokens"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_XET": True,
    }.items():
        monkeypatch.setattr(constants, name, value)
    for name, value in {
        "HF_ENDPOINT": standin.endpoint,
        "HUB_DATASETS_URL": standin.endpoint + "/datasets/{repo_id}/resolve/{revision}/{path}",
        "HF_CACHE_HOME": home,
        "HF_DATASETS_CACHE": tmp_path / "hf_home" / "datasets",
        "HF_HUB_OFFLINE": False,
        "HF_DATASETS_OFFLINE": False,
        "HF_UPDATE_DOWNLOAD_COUNTS": False,
    }.items():
        monkeypatch.setattr(datasets.config, name, value)
    try:
        yield standin
    finally:
        huggingface_hub.close_session()  # drops the pooled connections to this server
        standin.stop()
    assert not standin.unhandled, f"requests the stand-in does not emulate: {standin.unhandled}"
