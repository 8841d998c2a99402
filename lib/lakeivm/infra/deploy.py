"""The deployment users run, without Docker, on loopback under one folder.

What it is for a user: ``docs/operations/deployment.md#without-docker-make-cluster-demo``.

``start_stack`` starts, each bound to 127.0.0.1 on free ports and waited on by a health check:

1. **PostgreSQL** from the machine's binaries (``initdb``, ``postgres``, ``pg_isready``, ``createdb``
   under ``/usr/lib/postgresql/*/bin`` or on PATH; as root the server runs as user ``postgres``);
2. a **Spark standalone master and worker** from pyspark's own ``bin/spark-class``;
3. lakeivm's **Spark Connect server** in front of that master (``lakeivm.infra.server``);
4. **Airflow 3** -- ``airflow db migrate``, then api-server, scheduler, dag-processor, triggerer --
   with LocalExecutor (``lakeivm.infra.airflow_executor``: the tasks' imports preloaded before it forks)
   on PostgreSQL, the DAG folder of the package lakeivm.dags, the connection
   ``spark_connect_default`` naming the Connect server and ``LAKEIVM_*`` exported to every process.

It returns a ``Stack``, a context manager whose ``stop()`` ends every process it started by its
pid and process group. Airflow 3.3's log servers (scheduler, triggerer) listen on all interfaces
and have no host setting, so they are not started (``--skip-serve-logs``): with LocalExecutor
every task log is a local file the api-server reads itself. The api-server uses SimpleAuthManager
with every user an admin (``simple_auth_manager_all_admins``), fit for loopback only.

Example::

    with start_stack(Path("/tmp/stack"), lake="/tmp/stack/lake") as stack:
        print(stack.ui_url)

``python -m lakeivm.infra.deploy`` (``make cluster-demo``) runs it for a person.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from lakeivm.infra import server
from lakeivm.infra.airflow_api import AirflowAPI
from lakeivm.config import Settings, load_settings
from lakeivm.errors import LakeIVMError
from lakeivm.processes import Service, alive, listening, run, spawn, wait_for
from lakeivm.spark import class_archive_options

HOST = "127.0.0.1"
DAGS_FOLDER = Path(str(files("lakeivm.dags")))  # dags/ of a checkout, lakeivm/dags/ installed
# Started after the api-server is healthy; keyed by the name the api-server's health check gives them.
AIRFLOW_SERVICES = {"scheduler": ["scheduler", "--skip-serve-logs"], "dag_processor": ["dag-processor"],
                    "triggerer": ["triggerer", "--skip-serve-logs"]}

Progress = Callable[[str], None]


@dataclass
class Stack:
    """A running stack: where each service listens, the environment Airflow runs with, the processes."""

    root: Path
    settings: Settings
    env: dict[str, str] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    connect: server.ServerInfo | None = None
    postgres_url: str = ""
    spark_master: str = ""
    spark_ui: str = ""
    api_url: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # seconds each service took to become healthy

    @property
    def ui_url(self) -> str:
        return self.api_url

    @property
    def api(self) -> AirflowAPI:
        return AirflowAPI(self.api_url)

    def pids(self) -> list[int]:
        """Every process the stack started (the Connect server included)."""
        return [s.process.pid for s in self.services] + ([self.connect.pid] if self.connect else [])

    def alive(self) -> list[int]:
        return [pid for pid in self.pids() if alive(pid)]

    def stop(self) -> None:
        """Stop every service, newest first: Airflow, the Connect server, Spark, PostgreSQL; a failure
        to stop one does not keep the others running."""
        errors = []
        for service in reversed(self.services):
            if service.name == "spark-worker":
                errors += _attempt(self._stop_connect)
            errors += _attempt(service.stop)
        errors += _attempt(self._stop_connect)
        if errors:
            raise LakeIVMError("could not stop every service: " + "; ".join(map(str, errors)))

    def _stop_connect(self) -> None:
        if self.connect is not None:
            with _lakeivm_home(self.root):
                server.stop(self.connect.remote)
            self.connect = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_stack(root: Path, lake: str, views: str | None = None, settings: Settings | None = None,
                progress: Progress = print) -> Stack:
    """Start the whole stack under ``root`` for the lake ``lake``; stops what it started if a step fails."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    base = settings or load_settings()
    stack = Stack(root, base.with_(lake=lake, views=views or base.views))
    try:
        start_postgres(stack, progress)
        start_spark_cluster(stack, progress)
        start_connect_server(stack, progress)
        start_airflow(stack, progress)
    except BaseException:
        stack.stop()
        raise
    write_environment(stack)
    return stack


def write_environment(stack: Stack) -> tuple[Path, Path]:
    """The stack's environment for an operator's shell: ``<root>/stack.env`` (the variables Airflow's
    processes and lakeivm's CLI need, to ``source``) and ``<root>/lakeivm.toml`` (lake, views and
    Connect server, read by lakeivm from that folder). Returns both paths."""
    import shlex

    own = {key: value for key, value in stack.env.items() if key.startswith(("AIRFLOW", "LAKEIVM_")) or key.lower() == "no_proxy"}
    env_file = stack.root / "stack.env"
    env_file.write_text("# the environment of this lakeivm stack: `source` it, then use `airflow` and `lakeivm`\n"
                        + "".join(f"export {key}={shlex.quote(value)}\n" for key, value in sorted(own.items())))
    env_file.chmod(0o600)  # it holds the stack's secret keys
    settings = stack.settings
    toml = stack.root / "lakeivm.toml"
    toml.write_text(f"lake = {json.dumps(settings.lake)}\nviews = {json.dumps(settings.views)}\n"
                    f"spark_remote = {json.dumps(settings.spark_remote)}\n")
    return env_file, toml


def start_postgres(stack: Stack, progress: Progress) -> None:
    """initdb a fresh cluster under ``root/postgres`` and run ``postgres`` on loopback (TCP only)."""
    t0 = time.perf_counter()
    user = _postgres_user()
    data = stack.root / "postgres"
    data.mkdir(mode=0o700)
    if user is not None:
        _grant_traversal(data)
        shutil.chown(data, user.pw_uid, user.pw_gid)
    as_user = {"user": user.pw_uid, "group": user.pw_gid} if user else {}
    run([postgres_binary("initdb"), "-D", str(data), "-U", "airflow", "--auth=trust", "-E", "UTF8", "--no-sync"],
         stack.root / "initdb.log", **as_user)
    port = free_port()
    command = [postgres_binary("postgres"), "-D", str(data), "-h", HOST, "-p", str(port),
               "-c", "unix_socket_directories=", "-c", "fsync=off"]  # a scratch cluster: no durability needed
    stack.services.append(spawn("postgres", command, stack.root / "postgres.log", os.environ.copy(),
                                 stop_signal=signal.SIGINT, **as_user))  # SIGINT: PostgreSQL's fast shutdown
    wait_for(lambda: subprocess.run([postgres_binary("pg_isready"), "-h", HOST, "-p", str(port)],
                                 capture_output=True).returncode == 0, "PostgreSQL", stack.services[-1])
    run([postgres_binary("createdb"), "-h", HOST, "-p", str(port), "-U", "airflow", "airflow"], stack.root / "createdb.log")
    stack.postgres_url = f"postgresql+psycopg2://airflow@{HOST}:{port}/airflow"
    _ready(stack, "postgres", t0, f"PostgreSQL on {HOST}:{port}", progress)


def start_spark_cluster(stack: Stack, progress: Progress) -> None:
    """A standalone master and one worker (``spark-class``), both on loopback."""
    env = {**os.environ, "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(stack.root / "spark-logs"),
           "SPARK_LOCAL_DIRS": str(stack.root / "spark-local"),
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",  # its REST server has a fixed port (6066)
           "SPARK_DAEMON_JAVA_OPTS": f"{class_archive_options()} {os.environ.get('SPARK_DAEMON_JAVA_OPTS', '')}".strip()}
    t0 = time.perf_counter()
    port, ui = free_port(), free_port()
    stack.services.append(spawn("spark-master", [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", HOST,
                                                  "--port", str(port), "--webui-port", str(ui)],
                                 stack.root / "spark-master.log", env))
    stack.spark_master, stack.spark_ui = f"spark://{HOST}:{port}", f"http://{HOST}:{ui}"
    wait_for(lambda: listening(HOST, port) and _http_ok(stack.spark_ui), "the Spark master", stack.services[-1])
    _ready(stack, "spark-master", t0, f"Spark master {stack.spark_master} (UI {stack.spark_ui})", progress)
    t0 = time.perf_counter()
    stack.services.append(spawn("spark-worker", [_spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                                                  "--port", str(free_port()), "--webui-port", str(free_port()),
                                                  "--cores", "2", "--memory", "2g", "--work-dir", str(stack.root / "spark-work"),
                                                  stack.spark_master],
                                 stack.root / "spark-worker.log", env))
    wait_for(lambda: _json(f"{stack.spark_ui}/json/").get("aliveworkers", 0) >= 1, "the Spark worker", stack.services[-1])
    _ready(stack, "spark-worker", t0, "Spark worker registered (2 cores, 2g)", progress)


def start_connect_server(stack: Stack, progress: Progress) -> None:
    """lakeivm's Spark Connect server in front of the standalone master (its cold start, paid once)."""
    t0 = time.perf_counter()
    remote = f"sc://{HOST}:{free_port()}"
    ui_port = stack.spark_ui.rsplit(":", 1)[1]  # the master's UI answers its cluster's cores (server.cluster_share)
    settings = stack.settings.with_(spark_conf={"spark.driver.memory": "2g", "spark.master.ui.port": ui_port, **stack.settings.spark_conf})
    with _lakeivm_home(stack.root):
        stack.connect = server.start(settings, master=stack.spark_master, remote=remote)
    stack.settings = stack.settings.with_(spark_remote=remote, spark_master=stack.spark_master)
    _ready(stack, "spark-connect", t0, f"Spark Connect server {remote} (master {stack.spark_master})", progress)


def start_airflow(stack: Stack, progress: Progress) -> None:
    """``airflow db migrate``, the api-server (waited on first), then scheduler, dag-processor and triggerer."""
    port = free_port()
    stack.api_url = f"http://{HOST}:{port}"
    stack.env = airflow_env(stack, port)
    t0 = time.perf_counter()
    run([_airflow(), "db", "migrate"], stack.root / "airflow-db-migrate.log", env=stack.env)
    _ready(stack, "airflow-db-migrate", t0, "airflow db migrate (PostgreSQL)", progress)
    t0 = time.perf_counter()
    stack.services.append(spawn("api-server", [_airflow(), "api-server", "--host", HOST, "--port", str(port), "--workers", "1"],
                                 stack.root / "airflow-api-server.log", stack.env))
    wait_for(lambda: _health(stack).get("metadatabase", {}).get("status") == "healthy", "the Airflow api-server", stack.services[-1])
    _ready(stack, "api-server", t0, f"Airflow api-server {stack.api_url}", progress)
    for name, args in AIRFLOW_SERVICES.items():
        stack.services.append(spawn(name, [_airflow(), *args], stack.root / f"airflow-{name}.log", stack.env))
    for service in stack.services[-len(AIRFLOW_SERVICES):]:
        name = service.name
        wait_for(lambda: _health(stack).get(name, {}).get("status") == "healthy", f"the Airflow {name}", service)
        _ready(stack, name, service.started, f"Airflow {name.replace('_', '-')}", progress)


def airflow_env(stack: Stack, api_port: int) -> dict[str, str]:
    """The environment of every Airflow process (and of CLI calls against the stack)."""
    settings = stack.settings
    remote_port = int(settings.spark_remote.rsplit(":", 1)[1])
    return {
        **os.environ,
        "AIRFLOW_HOME": str(stack.root / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": stack.postgres_url,
        "AIRFLOW__CORE__EXECUTOR": "lakeivm.infra.airflow_executor.LakeIVMLocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        # An idle scheduler sleeps this long between loops (Airflow's default: 1 s), and an on-demand
        # refresh waits for a loop at each hop: the run queued, apply done, validate done. A shorter
        # sleep makes a refresh visible sooner and costs an idle scheduler and PostgreSQL more CPU
        # (both measured in docs/benchmarks.md#latency).
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": os.environ.get("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "0.1"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{HOST}:{api_port}/execution/",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://{HOST}:{api_port}",
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps({"conn_type": "spark_connect", "host": HOST, "port": remote_port}),
        "LAKEIVM_LAKE": settings.lake,
        "LAKEIVM_VIEWS": settings.views,
        "LAKEIVM_SPARK_REMOTE": settings.spark_remote,
        "LAKEIVM_SPARK_MASTER": settings.spark_master,
        "LAKEIVM_HOME": str(stack.root),
        "NO_PROXY": f"{HOST},localhost",
        "no_proxy": f"{HOST},localhost",
    }


def postgres_binary(name: str) -> str:
    """The path of a PostgreSQL program (newest version under /usr/lib/postgresql first, then PATH)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[-3]), reverse=True)
    path = found[0] if found else shutil.which(name)
    if not path:
        raise LakeIVMError(f"PostgreSQL's `{name}` was not found (looked in /usr/lib/postgresql/*/bin and on PATH); "
                           "install PostgreSQL, e.g. `apt-get install -y postgresql` on Debian/Ubuntu.")
    return path


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    """``python -m lakeivm.infra.deploy [--scale S] [--root DIR]``: the stack for a person (``make cluster-demo``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lakeivm.infra.deploy", description=main.__doc__)
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor of the demo lake")
    parser.add_argument("--root", help="folder for the stack (default: a new temp folder)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, also when started in the background
    signal.signal(signal.SIGTERM, _interrupt)
    root = Path(args.root or tempfile.mkdtemp(prefix="lakeivm-cluster-"))
    try:
        _demo(root, args.scale)
    except KeyboardInterrupt:
        return 130
    return 0


def _demo(root: Path, scale: float) -> None:
    from lakeivm.datagen.tpch import generate_tpch
    from lakeivm.store.lake import open_lake
    from lakeivm.spark import connect

    stack = start_stack(root, lake=str(root / "lake"))
    try:
        spark = connect(stack.settings.spark_remote, stack.settings)
        generate_tpch(open_lake(spark, stack.settings), scale, tables=("nation", "customer", "orders", "lineitem"))
        dag_id = "lakeivm__revenue_by_nation"
        stack.api.wait_for_dag(dag_id)
        stack.api.unpause(dag_id)
        refresh = stack.api.wait_for_run(dag_id, stack.api.trigger(dag_id, {"refresh": True}))
        print(f"{dag_id}: on-demand refresh {refresh['dag_run_id']} {refresh['state']}")
        print(f"\nAirflow UI: {stack.ui_url}   (every user is admin; loopback only)\nSpark master UI: {stack.spark_ui}\n"
              f"Spark Connect: {stack.settings.spark_remote}   lake: {stack.settings.lake}   logs: {root}\n"
              f"From another shell: source {root}/stack.env   (or cd {root}: lakeivm reads its lakeivm.toml), then\n"
              f"  lakeivm status\n  airflow dags trigger {dag_id} -c '{{\"refresh\": true}}'\n"
              "Press Ctrl-C to stop everything.", flush=True)
        while not (ended := [s for s in stack.services if s.process.poll() is not None]):
            time.sleep(1)
        print(f"{ended[0].name} exited ({ended[0].process.returncode}); see {ended[0].log}", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stopping short
            signal.signal(sig, signal.SIG_IGN)
        print("stopping every service ...", flush=True)
        stack.stop()
        print(f"stopped; the lake and the logs stay in {root}", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _ready(stack: Stack, name: str, t0: float, what: str, progress: Progress) -> None:
    stack.timings[name] = round(time.perf_counter() - t0, 2)
    progress(f"deploy: {what} ready in {stack.timings[name]:.1f} s")


def _health(stack: Stack) -> dict:
    return _json(f"{stack.api_url}/api/v2/monitor/health")


def _json(url: str) -> dict:
    with _OPENER.open(url, timeout=5) as response:
        return json.loads(response.read())


def _http_ok(url: str) -> bool:
    with _OPENER.open(url, timeout=5) as response:
        return response.status == 200


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def _spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-class")


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


def _postgres_user() -> pwd.struct_passwd | None:
    """None unless running as root, where PostgreSQL refuses to run: then the ``postgres`` user."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise LakeIVMError("PostgreSQL cannot run as root and there is no `postgres` user: run as another user, "
                           "or create one (installing the `postgresql` package does).") from None


def _grant_traversal(folder: Path) -> None:
    """Let the ``postgres`` user reach ``folder``: add o+x to its parents inside the temp folder.
    Anywhere else a parent that others cannot enter is an error, not something to change."""
    temp = Path(tempfile.gettempdir()).resolve()
    for parent in folder.parents:
        mode = parent.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        if temp not in (parent, *parent.parents) or parent == temp:
            raise LakeIVMError(f"PostgreSQL runs as user `postgres` (not root), which cannot enter {parent}; "
                               f"put the stack under {temp} or run as a non-root user.")
        parent.chmod(mode | stat.S_IXOTH)


@contextlib.contextmanager
def _lakeivm_home(root: Path) -> Iterator[None]:
    """``lakeivm.infra.server`` keeps its run folder under LAKEIVM_HOME: here, inside the stack's folder."""
    before = os.environ.get("LAKEIVM_HOME")
    os.environ["LAKEIVM_HOME"] = str(root)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LAKEIVM_HOME", None)
        else:
            os.environ["LAKEIVM_HOME"] = before


def _attempt(step: Callable[[], None]) -> list[Exception]:
    try:
        step()
    except Exception as err:  # keep stopping the other services; reported together by Stack.stop
        return [err]
    return []




if __name__ == "__main__":
    sys.exit(main())
