"""A Google Cloud Storage emulator on loopback, so tests can use real `gs://` paths.

    with gcs_emulator() as gcs:                  # or: gcs = gcs_emulator_fixture() in a conftest
        out = gcs.url("run1")                   # "gs://tokshards-test/run1"
        subprocess.run([...], env=gcs.subprocess_env())

It runs gcp-storage-emulator (PyPI) in a child process, in memory, on 127.0.0.1 and a port the
kernel picks, with one bucket. Two fixes make the emulator behave like GCS for our readers:

- Suffix ranges. `Range: bytes=-N` (the last N bytes) is answered with the whole object (200, no
  Content-Range). ArrayRecord's gs:// reader opens every shard with `bytes=-1048576` and takes the
  body as the object's last MiB, so on shards over 1 MiB every position is off by size - 1 MiB
  ("Invalid Riegeli/records file: chunk boundary is ... Failed to read RiegeliPostscript"). The
  child rewrites such a range to `bytes=max(size-N, 0)-`, which the emulator answers right.
- Connections. The stock server listens with a backlog of 5 and answers one request at a time.
  ArrayRecord's reader opens many ranged streams at once; past 5 the kernel drops connection
  attempts and the client retries a second later (reading a 1.2 MB shard took 30-80 s instead of
  0.2 s). The child listens with a backlog of 256 and writes responses on a thread per connection
  (each `bytes=N-` read is answered with the whole rest of the object, which the reader drops
  after a record), while the handlers, which build responses in memory, run one at a time under a
  lock, since the emulator's store is not thread-safe.

The environment it sets (in `os.environ` while open, and in `env` for subprocesses):

- STORAGE_EMULATOR_HOST: google-cloud-storage, hence Beam's GcsIO and gcsfs (etils.epath), send
  their JSON API requests to the emulator.
- CLOUD_STORAGE_EMULATOR_ENDPOINT: the same for google-cloud-cpp, inside ArrayRecord's reader.
  Without it the reader goes to storage.googleapis.com and, with no network, hangs.
- GOOGLE_APPLICATION_CREDENTIALS: a static authorized-user file with a token that expires in
  2999, so google-auth finds credentials at once and never asks oauth2.googleapis.com for a new
  token (a file without `expiry` counts as expired). Without a file every process spends ~25 s
  probing the GCE metadata server.
- GOOGLE_CLOUD_PROJECT: a project for the clients (google-auth warns when it finds none).
- GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false: otherwise gcsfs asks a gRPC endpoint whether the bucket
  is hierarchical, and that call hangs on the emulator.

The emulator keeps objects in memory until it stops; `reset()` empties the bucket between tests.
A killed test process takes the emulator with it (it exits when its stdin closes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator

BUCKET = "tokshards-test"
PROJECT = "tokshards-test"
_ENV_KEYS = (
    "STORAGE_EMULATOR_HOST",
    "CLOUD_STORAGE_EMULATOR_ENDPOINT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT",
)
_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 5.0

# The child: gcp-storage-emulator's request handler with the two fixes above. Prints its port.
_CHILD = r"""
import logging, os, re, sys, threading
from functools import partial
from http.server import ThreadingHTTPServer
from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers.buckets import create_bucket
from gcp_storage_emulator.storage import Storage

SUFFIX = re.compile(r"\s*bytes\s*=\s*-(\d+)\s*")
LOCK = threading.Lock()

class WithRange:
    def __init__(self, request, value):
        self._request, self._value = request, value
    def __getattr__(self, name):
        return getattr(self._request, name)
    def get_header(self, key, default=None):
        return self._value if key.lower() == "range" else self._request.get_header(key, default)

def guarded(handler):
    def run(request, response, storage, *args, **kwargs):
        with LOCK:
            suffix = SUFFIX.fullmatch(request.get_header("range") or "")
            params = request.params or {}
            if suffix and "object_id" in params:
                try:
                    size = int(
                        storage.get_file_obj(params["bucket_name"], params["object_id"])["size"]
                    )
                except NotFound:
                    pass
                else:
                    request = WithRange(request, f"bytes={max(size - int(suffix[1]), 0)}-")
                    logging.info("Range %s read as %s", suffix[0], request.get_header("range"))
            return handler(request, response, storage, *args, **kwargs)
    return run

server.HANDLERS = tuple(
    (rx, {m: guarded(h) for m, h in table.items()}) for rx, table in server.HANDLERS
)
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
storage = Storage(use_memory_fs=True)
create_bucket(sys.argv[1], storage)
class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # a reader that stops early is normal

class Handler(server.RequestHandler):
    disable_nagle_algorithm = True

httpd = Server(("127.0.0.1", 0), partial(Handler, storage))
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"""


@dataclasses.dataclass(frozen=True)
class GcsEmulator:
    """A running emulator: its endpoint, its bucket, and the environment that points clients at
    it."""

    endpoint: str
    bucket: str
    env: dict[str, str]
    log_path: str

    def url(self, *parts: str) -> str:
        """`gs://BUCKET/` + the parts joined by `/` (a trailing `/` stays: Beam's prefix form)."""
        return f"gs://{self.bucket}/" + "/".join(parts).lstrip("/")

    def subprocess_env(self) -> dict[str, str]:
        """os.environ plus `env`, for `subprocess.run(..., env=...)`."""
        return {**os.environ, **self.env}

    def reset(self) -> None:
        """Deletes every object (the bucket stays)."""
        urllib.request.urlopen(f"{self.endpoint}/wipe?keep-buckets=1", timeout=10).read()


def _wait_for_port(proc: subprocess.Popen[str], log_path: str) -> int:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], _START_TIMEOUT_S)
    line = proc.stdout.readline() if ready else ""
    if not line.strip().isdigit():
        with open(log_path) as log:
            raise RuntimeError(f"the GCS emulator did not start: {log.read()[-2000:]}")
    return int(line)


def _wait_until_answers(endpoint: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/", timeout=2) as reply:
                if reply.read() == b"OK":
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


def _clear_client_caches() -> None:
    """gcsfs caches filesystems (with their endpoint) per process; a new emulator needs new ones."""
    gcsfs = sys.modules.get("gcsfs")
    if gcsfs is not None:
        gcsfs.GCSFileSystem.clear_instance_cache()


@contextlib.contextmanager
def gcs_emulator(bucket: str = BUCKET) -> Iterator[GcsEmulator]:
    """Starts the emulator with `bucket`, sets `env` in os.environ, and undoes both on exit."""
    with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as tmp:
        credentials = os.path.join(tmp, "credentials.json")
        with open(credentials, "w") as f:
            json.dump(
                {
                    "type": "authorized_user",
                    "client_id": "emulator",
                    "client_secret": "emulator",
                    "refresh_token": "emulator",
                    "token": "emulator",
                    "expiry": "2999-01-01T00:00:00Z",  # valid until then: never refreshed
                },
                f,
            )
        log_path = os.path.join(tmp, "emulator.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, bucket],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        saved = {key: os.environ.get(key) for key in _ENV_KEYS}
        try:
            endpoint = f"http://127.0.0.1:{_wait_for_port(proc, log_path)}"
            _wait_until_answers(endpoint)
            env = {
                "STORAGE_EMULATOR_HOST": endpoint,
                "CLOUD_STORAGE_EMULATOR_ENDPOINT": endpoint,
                "GOOGLE_APPLICATION_CREDENTIALS": credentials,
                "GOOGLE_CLOUD_PROJECT": PROJECT,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            }
            os.environ.update(env)
            _clear_client_caches()
            yield GcsEmulator(endpoint=endpoint, bucket=bucket, env=env, log_path=log_path)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _clear_client_caches()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()  # the child exits when its stdin closes
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def gcs_emulator_fixture(
    scope: str = "session", bucket: str = BUCKET
) -> Callable[..., Iterator[GcsEmulator]]:
    """A pytest fixture of one emulator per `scope`: in a conftest,
    `gcs = gcs_emulator_fixture()`."""
    import pytest

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def fixture() -> Iterator[GcsEmulator]:
        with gcs_emulator(bucket) as gcs:
            yield gcs

    return fixture
