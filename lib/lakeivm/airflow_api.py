"""A small client of Airflow 3's REST API v2: unpause a DAG, trigger a run with conf, wait for it,
read its task instances and the Asset events it emitted.

Authentication: a bearer token from the api-server's ``/auth/token``, which SimpleAuthManager hands
out without credentials when ``[core] simple_auth_manager_all_admins`` is set (the loopback stack
of ``lakeivm.deploy``); with another auth manager pass ``token``.

Example::

    api = AirflowAPI("http://127.0.0.1:8080")
    api.unpause("lakeivm__revenue_by_nation")
    run = api.wait_for_run("lakeivm__revenue_by_nation", api.trigger("lakeivm__revenue_by_nation", {"refresh": True}))
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from lakeivm.errors import LakeIVMError

FINISHED = ("success", "failed")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


@dataclass
class AirflowAPI:
    """The REST API v2 of the api-server at ``url``."""

    url: str
    token: str | None = None

    def request(self, method: str, path: str, body: dict | None = None, **query: Any) -> dict:
        """One call; returns the decoded JSON answer, raises LakeIVMError with the server's detail."""
        address = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(address, data=data, method=method, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self._token()}"})
        try:
            with _OPENER.open(request, timeout=30) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            raise LakeIVMError(f"Airflow API {method} {path}: {err.code} {err.read().decode(errors='replace')[:500]}") from err

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
        """Queue a manual run with ``conf``; returns its run id."""
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

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
            with _OPENER.open(f"{self.url}/auth/token", timeout=30) as response:
                self.token = json.loads(response.read())["access_token"]
        return self.token
