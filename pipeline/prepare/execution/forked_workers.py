"""The local runner's SDK workers, forked from the job instead of started as fresh interpreters.

Beam's local runner starts each worker process as a new interpreter that imports Beam, the DoFn's
modules and the tokenizer all over again: two seconds and more before any unit starts, on every
run, which on a 400 MB corpus is a sixth of the whole. Here the job forks its workers first, while
it still runs a single thread (so a fork is safe, and no gRPC channel exists yet), with everything
already imported and the tokenizer loaded; it then serves Beam's external worker pool protocol on
the loopback, and when the runner asks for a worker, one forked process becomes Beam's own
`SdkHarness` on the endpoints it is given. Only the way the processes come to exist differs from
Beam's `multi_processing` mode: the runner, the harness and the protocol are Beam's.

A worker runs whatever functions its caller sends, so the pool serves only the job that created
it: the job's runner presents a secret drawn for this pool (Beam passes an external environment's
`params` with every `StartWorker`), and any other caller on the host is refused.
"""

from __future__ import annotations

import gc
import hmac
import logging
import multiprocessing.connection
import os
import secrets
import signal
import threading
from concurrent import futures

import grpc
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker import data_plane
from apache_beam.runners.worker.sdk_worker import SdkHarness
from apache_beam.transforms import environments

from pipeline.forking import die_with_parent

SECRET_PARAM = "pool_secret"


def _serve_one_worker(requests: multiprocessing.connection.Connection) -> None:
    """The life of a forked worker: wait for the runner's endpoints, then be a Beam SDK harness."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops the workers on Ctrl-C
    logging.getLogger().setLevel(logging.WARNING)  # the harness narrates every bundle at INFO
    try:
        control_url, worker_id = requests.recv()
    except EOFError:
        return  # the job ended without asking for this worker
    SdkHarness(control_url, worker_id=worker_id).run()


class _ForkedWorkerPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
    def __init__(self, requests: list[multiprocessing.connection.Connection], secret: str):
        self._idle = list(requests)
        self._secret = secret

    def StartWorker(self, request, context):  # noqa: N802 (the gRPC method's name)
        if not hmac.compare_digest(request.params.get(SECRET_PARAM, ""), self._secret):
            return beam_fn_api_pb2.StartWorkerResponse(
                error="refused: not the job this worker pool serves"
            )
        if not self._idle:
            return beam_fn_api_pb2.StartWorkerResponse(error="every forked worker is taken")
        self._idle.pop(0).send((request.control_endpoint.url, request.worker_id))
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, request, context):  # noqa: N802
        return (
            beam_fn_api_pb2.StopWorkerResponse()
        )  # a worker ends when the runner closes its stream


class ForkedWorkers:
    """`count` worker processes forked now, and the pool that hands them to the runner.

    Create it before anything starts a thread in this process; `options` then direct the local
    runner to it. Close it when the pipeline is done. The objects this process holds are frozen
    out of the garbage collector's reach first, so that no worker's collection walks (and so
    copies) the heap it inherits: a worker's first unit may otherwise pay a full collection of
    Beam's, spaCy's and the tokenizer's objects.
    """

    def __init__(self, count: int):
        self.pids: list[int] = []
        requests = []
        gc.freeze()
        for _ in range(count):
            receive, send = multiprocessing.Pipe(duplex=False)
            pid = os.fork()
            if pid == 0:
                send.close()
                try:
                    _serve_one_worker(receive)
                finally:
                    os._exit(0)  # never return into the parent's code
            receive.close()
            self.pids.append(pid)
            requests.append(send)
        self._requests = requests
        self._secret = secrets.token_hex(32)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
            _ForkedWorkerPool(requests, self._secret), self._server
        )
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def environment(self) -> environments.Environment:
        return environments.ExternalEnvironment(self.address, params={SECRET_PARAM: self._secret})

    def close(self) -> None:
        """Once the pipeline is done: every worker has finished its bundles. The runner's threads
        that read the workers' data streams may still wait on them, and would report each stream
        cut by a worker's death as an error with its traceback: that is teardown here (a failure
        was recorded, or raised, already), so they are silenced first."""
        logging.getLogger(data_plane.__name__).setLevel(logging.CRITICAL + 1)
        threading.excepthook = lambda args: None
        self._server.stop(grace=None)
        for send in self._requests:
            send.close()
        for pid in self.pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def forked_worker_count(options: PipelineOptions) -> int:
    """How many workers a local run forks: Beam's `multi_processing` mode (the project's local
    default) runs on forked workers, one per `direct_num_workers`; the other modes fork none."""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode != "multi_processing":
        return 0
    return direct.direct_num_workers or os.cpu_count() or 1
