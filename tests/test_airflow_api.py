"""The Airflow REST client retries transient failures (slow answers, 5xx, refused connections) with a
bounded backoff, against a tiny local HTTP server that misbehaves for its first calls."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lakeivm.infra.airflow_api import AirflowAPI
from lakeivm.errors import LakeIVMError


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: list[tuple[str, str]] = []
        self.failures: list[str] = []  # what each next call does before answering: "slow", "503", "404", "409"
        self.runs: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.calls.append((self.command, self.path))
        failure = self.server.failures.pop(0) if self.server.failures else None
        if self.command == "POST" and failure == "409":  # an earlier attempt reached the server: the run exists
            return self._send(409, {"detail": "Unique constraint violation"})
        if self.command == "POST":
            self.server.runs.append(body["dag_run_id"])
        if failure == "slow":
            time.sleep(1.0)  # past the client's timeout
        elif failure is not None:
            return self._send(int(failure), {"detail": f"failure {failure}"})
        if self.command == "POST":
            return self._send(200, {"dag_run_id": body["dag_run_id"], "state": "queued"})
        if self.path.endswith("/dagRuns?order_by=run_after&limit=100"):
            return self._send(200, {"dag_runs": [{"dag_run_id": run} for run in self.server.runs]})
        self._send(200, {"dag_run_id": "r1", "state": "success"})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on a slow answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _client(url: str, retries: int = 4) -> AirflowAPI:
    return AirflowAPI(url, token="t", timeout=0.3, retries=retries, backoff=0.01)


def test_a_slow_answer_and_5xx_are_retried_until_the_server_answers(server):
    server.failures = ["slow", "503", "502"]
    assert _client(server.url).wait_for_run("d", "r1", timeout=30)["state"] == "success"
    assert len(server.calls) == 4


def test_a_4xx_is_raised_at_once(server):
    server.failures = ["404"]
    with pytest.raises(LakeIVMError, match=r"GET /api/v2/dags/d: 404 .*failure 404"):
        _client(server.url).get("/api/v2/dags/d")
    assert len(server.calls) == 1


def test_retries_are_bounded_and_the_error_says_what_failed(server):
    server.failures = ["500"] * 3
    with pytest.raises(LakeIVMError, match=r"GET /x: no good answer from http://127.0.0.1:\d+ in 3 attempts over \d+ s "
                                           r"\(last: 500 .*failure 500.*\); is the api-server up"):
        _client(server.url, retries=2).get("/x")
    assert len(server.calls) == 3


def test_a_refused_connection_is_retried_then_named():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(LakeIVMError, match=r"in 3 attempts .*\(last: .*refused.*\)"):
        _client(f"http://127.0.0.1:{port}", retries=2).get("/x")
    assert time.monotonic() - started < 5


def test_the_token_call_is_retried_too(server):
    server.failures = ["503"]
    api = AirflowAPI(server.url, timeout=0.3, backoff=0.01)
    with pytest.raises(KeyError):  # this server hands out no token: the second attempt was made and answered
        api.get("/x")
    assert server.calls == [("GET", "/auth/token")] * 2


def test_a_retried_trigger_whose_first_attempt_arrived_queues_one_run(server):
    server.failures = ["slow", "409"]  # the first POST is slow (the client gives up) but creates the run
    run_id = _client(server.url).trigger("d", {"refresh": True})
    assert run_id.startswith("manual__lakeivm_") and server.runs == [run_id]
    assert [call for call in server.calls if call[0] == "POST"] == [("POST", "/api/v2/dags/d/dagRuns")] * 2
