"""The long-lived Spark every caller connects to: a Spark Connect server with Delta configured.

``lakeivm spark start`` runs pyspark's own ``SparkConnectServer`` through ``spark-submit`` (local
master by default, ``--master spark://...`` in front of a cluster), with Delta's JARs as files, the
session settings of ``lakeivm.spark`` and this venv's Python for its Python workers
(``applyInPandas``). It listens on loopback unless told otherwise. Its pid, settings and log live
in a run folder (``~/.lakeivm/connect-<port>/``); ``stop`` ends it by that pid.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from lakeivm.config import DEFAULT_REMOTE, Settings, lakeivm_home
from lakeivm.errors import LakeIVMError
from lakeivm.processes import alive
from lakeivm.spark import jvm_conf, listening

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0


@dataclass(frozen=True)
class ServerInfo:
    """A running (or recorded) server: where it listens, its pid, master and log file."""

    remote: str
    pid: int
    master: str
    log: str
    started_at: float

    @property
    def ui_url(self) -> str:
        """The server's Spark UI (its REST API at /api/v1 counts the jobs runs cost)."""
        url = urlparse(self.remote)
        return f"http://{url.hostname}:{(url.port or 15002) + 1}"

    @property
    def alive(self) -> bool:
        return alive(self.pid) and listening(self.remote)


def run_folder(remote: str = DEFAULT_REMOTE) -> Path:
    """Where the server on ``remote``'s port keeps its pid file and log."""
    return lakeivm_home() / f"connect-{urlparse(remote).port or 15002}"


def start(settings: Settings, master: str = "local[2]", remote: str = DEFAULT_REMOTE,
          progress=lambda message: None) -> ServerInfo:
    """Start the server (or return the one already running on ``remote``); waits until it answers."""
    running = status(remote)
    if running is not None and running.alive:
        progress(f"lakeivm: Spark Connect server already running at {running.remote} (pid {running.pid}, master {running.master})")
        return running
    host, port = urlparse(remote).hostname or "127.0.0.1", urlparse(remote).port or 15002
    if listening(remote):
        raise LakeIVMError(f"port {port} on {host} is taken by another program; start the server on another port "
                           f"(`lakeivm spark start --remote sc://{host}:<port>`).")
    folder = run_folder(remote)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "server.log"
    conf = {**jvm_conf(settings.with_(spark_master=master), local=master.startswith("local")),
            "spark.connect.grpc.binding.address": host, "spark.connect.grpc.binding.port": str(port),
            "spark.app.name": "lakeivm-connect", "spark.pyspark.python": sys.executable,
            "spark.ui.enabled": "true", "spark.ui.port": str(port + 1),  # jobs visible (and countable) at ui_url
            "spark.driver.bindAddress": "127.0.0.1" if host in ("127.0.0.1", "localhost") else "0.0.0.0"}
    if master.startswith("spark://") and "spark.cores.max" not in conf:
        cores = settings.connect_cores or cluster_share(master, settings.spark_conf.get("spark.master.ui.port", 8080))
        if cores:
            conf["spark.cores.max"] = str(cores)
        progress(f"lakeivm: the Connect application takes {cores or 'every'} core(s) of the cluster"
                 + ("" if cores else " (its master's web UI did not answer; set connect_cores)"))
    command = [_spark_submit(), "--class", SERVER_CLASS, "--master", master, "--name", "lakeivm-connect"]
    if "spark.driver.memory" in conf:
        command += ["--driver-memory", conf.pop("spark.driver.memory")]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), "PYSPARK_PYTHON": sys.executable}
    t0 = time.perf_counter()
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    info = ServerInfo(remote, process.pid, master, str(log), time.time())
    (folder / "server.json").write_text(json.dumps(info.__dict__))
    progress(f"lakeivm: starting Spark Connect server at {remote} (pid {process.pid}, master {master}, log {log})")
    _wait_until_ready(info, process)
    progress(f"lakeivm: Spark Connect server ready in {time.perf_counter() - t0:.1f} s (a cold start, paid once)")
    return info


def cluster_share(master: str, ui_port: int | str = 8080) -> int | None:
    """Half the cores of the standalone cluster at ``master`` (at least 1), as its master's web UI
    reports its alive workers: the Connect application's default ``spark.cores.max``, so that jobs
    submitted beside it (``spark-submit``, another application) still get executors. None: no answer."""
    import urllib.request

    host = urlparse(master).hostname or "127.0.0.1"
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=5) as answer:
            cluster = json.load(answer)
    except (OSError, ValueError):
        return None
    return half_of(cluster)


def half_of(cluster: dict) -> int | None:
    """Half the cores of the alive workers in a standalone master's ``/json/`` answer (at least 1)."""
    cores = sum(w.get("cores", 0) for w in cluster.get("workers", []) if w.get("state") == "ALIVE")
    return max(1, cores // 2) if cores else None


def stop(remote: str = DEFAULT_REMOTE, timeout: float = 30.0) -> ServerInfo | None:
    """Stop the server recorded for ``remote`` (its whole process group); None if none was recorded."""
    info = status(remote)
    if info is None:
        return None
    from lakeivm.spark import release_connect_session

    release_connect_session()  # this process's session, released while the server is up
    if alive(info.pid):
        try:
            os.killpg(info.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + timeout
        while alive(info.pid) and time.time() < deadline:
            time.sleep(0.2)
        if alive(info.pid):
            os.killpg(info.pid, signal.SIGKILL)
    (run_folder(remote) / "server.json").unlink(missing_ok=True)
    return info


def status(remote: str = DEFAULT_REMOTE) -> ServerInfo | None:
    """The server recorded for ``remote``'s port, or None."""
    record = run_folder(remote) / "server.json"
    if not record.exists():
        return None
    return ServerInfo(**json.loads(record.read_text()))


def job_count(info: ServerInfo) -> int:
    """Spark jobs the server has run so far (its UI's REST API): a run's job count is the difference."""
    import urllib.request

    with urllib.request.urlopen(f"{info.ui_url}/api/v1/applications", timeout=5) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{info.ui_url}/api/v1/applications/{app}/jobs", timeout=10) as response:
        return 1 + max((job["jobId"] for job in json.load(response)), default=-1)  # ids count up (the UI keeps the last 1000)


def _wait_until_ready(info: ServerInfo, process: subprocess.Popen) -> None:
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        if process.poll() is not None:
            tail = Path(info.log).read_text(errors="replace").splitlines()[-20:]
            raise LakeIVMError(f"the Spark Connect server exited ({process.returncode}) while starting; its log "
                               f"({info.log}) ends:\n" + "\n".join(tail))
        if listening(info.remote):
            return
        time.sleep(0.5)
    stop(info.remote)
    raise LakeIVMError(f"the Spark Connect server did not listen on {info.remote} within {START_TIMEOUT:.0f} s; see {info.log}")


def _spark_submit() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-submit")
