"""A small client of Airflow 3's REST API v2: unpause a DAG, trigger a run with conf, wait for it,
read its task instances and the Asset events it emitted.

Authentication: a bearer token from the api-server's ``/auth/token``, which SimpleAuthManager hands
out without credentials when ``[core] simple_auth_manager_all_admins`` is set (the loopback stack
of ``lakeivm.infra.deploy``); with another auth manager pass ``token``.

Every call retries what is transient -- no answer within ``timeout``, a refused or reset connection,
a 5xx or 429 status -- ``retries`` times, waiting ``backoff`` seconds and twice as long each time after
(at most ``MAX_BACKOFF_S``), then raises LakeIVMError naming the call, the attempts and the last
problem. A 4xx answer is the caller's to handle and is raised at once. ``trigger`` names its run, so a
retried trigger whose first attempt did reach the server finds that run rather than queuing another.

Example::

    api = AirflowAPI("http://127.0.0.1:8080")
    api.unpause("lakeivm__revenue_by_nation")
    run = api.wait_for_run("lakeivm__revenue_by_nation", api.trigger("lakeivm__revenue_by_nation", {"refresh": True}))
"""
from __future__ import annotations

import http.client
import json
import time
import uuid
from collections.abc import Callable
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from lakeivm.errors import LakeIVMError

FINISHED = ("success", "failed")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 15.0


@dataclass
class AirflowAPI:
    """The REST API v2 of the api-server at ``url``."""

    url: str
    token: str | None = None
    timeout: float = 30.0  # seconds one attempt waits for the answer
    retries: int = 4  # attempts after the first, for transient failures only
    backoff: float = 1.0  # seconds before the first retry; doubled for each next one

    def request(self, method: str, path: str, body: dict | None = None, **query: Any) -> dict:
        """One call, retried while it fails transiently; returns the decoded JSON answer, raises
        LakeIVMError with the server's detail (a 4xx at once, a transient failure after the retries)."""
        address = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None

        def build() -> urllib.request.Request:
            return urllib.request.Request(address, data=data, method=method, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {self._token()}"})

        return json.loads(self._send(f"{method} {path}", build) or b"{}")

    def get(self, path: str, **query: Any) -> dict:
        return self.request("GET", path, **query)

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> dict:
        """The DAG once the dag-processor has parsed it (import errors are named on timeout)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                return self.get(f"/api/v2/dags/{dag_id}")
            except LakeIVMError as err:
                if " 404 " not in str(err):
                    raise
            time.sleep(1.0)
        errors = self.get("/api/v2/importErrors").get("import_errors", [])
        raise LakeIVMError(f"DAG {dag_id} was not parsed within {timeout:.0f} s; import errors: {errors}")

    def unpause(self, dag_id: str) -> dict:
        return self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """Queue a manual run with ``conf``; returns its run id. The id is chosen here, so that a retry
        after an attempt that reached the server finds the run (409) instead of queuing a second one."""
        run_id = f"manual__lakeivm_{uuid.uuid4().hex}"
        try:
            self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}})
        except LakeIVMError as err:
            if ": 409 " not in str(err) or run_id not in {run["dag_run_id"] for run in self.runs(dag_id)}:
                raise
        return run_id

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns", order_by="run_after", limit=100)["dag_runs"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0, poll: float = 0.2) -> dict:
        """The run once it finished (success or failed); raises on a timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            run = self.run(dag_id, run_id)
            if run["state"] in FINISHED:
                return run
            time.sleep(poll)
        raise LakeIVMError(f"run {run_id} of {dag_id} did not finish within {timeout:.0f} s (state {run['state']})")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances"
        return self.get(path)["task_instances"]

    def task_durations(self, dag_id: str, run_id: str) -> dict[str, float | None]:
        """Seconds each task of the run took, as Airflow recorded them."""
        return {ti["task_id"]: ti.get("duration") for ti in self.task_instances(dag_id, run_id)}

    def asset_events(self, dag_id: str) -> list[dict]:
        """The Asset events the DAG's runs emitted."""
        return self.get("/api/v2/assets/events", source_dag_id=dag_id, limit=100)["asset_events"]

    def _token(self) -> str:
        if self.token is None:
            self.token = json.loads(self._send("GET /auth/token", lambda: urllib.request.Request(f"{self.url}/auth/token")))["access_token"]
        return self.token

    def _send(self, call: str, build: Callable[[], urllib.request.Request]) -> bytes:
        """The answer's body to the request ``build`` makes, retried with backoff while it fails transiently."""
        started = time.monotonic()
        for attempt in range(self.retries + 1):
            try:
                with _OPENER.open(build(), timeout=self.timeout) as response:
                    return response.read()
            except urllib.error.HTTPError as err:
                detail = f"{err.code} {err.read().decode(errors='replace')[:500]}"
                if err.code not in TRANSIENT_STATUS:
                    raise LakeIVMError(f"Airflow API {call}: {detail}") from err
                problem = detail
            except (TimeoutError, urllib.error.URLError, ConnectionError, http.client.HTTPException) as err:
                reason = getattr(err, "reason", None) or err  # URLError wraps the socket's error
                problem = str(reason) or type(reason).__name__
            if attempt < self.retries:
                time.sleep(min(self.backoff * 2 ** attempt, MAX_BACKOFF_S))
        raise LakeIVMError(f"Airflow API {call}: no good answer from {self.url} in {self.retries + 1} attempts over "
                           f"{time.monotonic() - started:.0f} s (last: {problem}); is the "
                           "api-server up and reachable?")
