"""docker-compose.yml and the images' Dockerfiles, checked by parsing (no Docker engine or image
registry is reachable here, so the stack is never built or started by the tests)."""
from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKER = REPO_ROOT / "docker"

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
SPARK = ["spark-master", "spark-worker", "spark-connect"]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())

LAKE_UID, LAKE_GID = 50000, 0  # Airflow's user: every writer of the lake runs as it
PYTHON = "/opt/lakeivm/bin/python"  # the one Python path of both images (docker/python-path.sh)
JARS = "/opt/lakeivm/jars"


def _load(name: str):
    """A script of docker/ as a module."""
    spec = importlib.util.spec_from_file_location(name, DOCKER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instructions(dockerfile: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of ``(INSTRUCTION, arguments)``; continuation lines joined."""
    lines, current = [], ""
    for raw in (DOCKER / dockerfile).read_text().splitlines():
        if not current and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if current and raw.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    stages: list[list[tuple[str, str]]] = []
    for line in lines:
        instruction, _, args = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), " ".join(args.split())))
    return stages


def final_stage(dockerfile: str) -> list[tuple[str, str]]:
    return instructions(dockerfile)[-1]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for instruction, args in stage:
        if instruction == "ENV":
            env.update(dict(word.split("=", 1) for word in shlex.split(args)))
    return env


def index_of(stage: list[tuple[str, str]], instruction: str, containing: str) -> int:
    return next(i for i, (ins, args) in enumerate(stage) if ins == instruction and containing in args)


def pip_commands(dockerfile: str) -> list[list[str]]:
    """Every ``pip ...`` command of every RUN, split into words."""
    found = []
    for stage in instructions(dockerfile):
        for instruction, args in stage:
            if instruction == "RUN":
                for command in args.split("&&"):
                    words = shlex.split(command)
                    if words and words[0] == "pip":
                        found.append(words)
    return found


def pinned_version(package: str) -> str:
    project = PYPROJECT["project"]
    (pin,) = [dep for dep in [*project["dependencies"], *project["optional-dependencies"]["airflow"]] if dep.startswith(f"{package}==")]
    return pin.split("==")[1]


def lake_writers() -> list[str]:
    return [name for name, service in SERVICES.items()
            if any(str(volume).startswith("lake:") for volume in service.get("volumes", []))]


def test_services_exist():
    assert set(AIRFLOW + SPARK + ["postgres"]) <= set(SERVICES)
    assert [SERVICES[s]["command"] for s in AIRFLOW[1:]] == ["api-server", "scheduler", "dag-processor", "triggerer"]


def test_airflow_services_share_settings():
    env = SERVICES["airflow-scheduler"]["environment"]
    for service in AIRFLOW:
        assert SERVICES[service]["environment"] == env
    assert env["AIRFLOW__CORE__EXECUTOR"] == "lakeivm.infra.airflow_executor.LakeIVMLocalExecutor"  # LocalExecutor, imports preloaded
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/lakeivm/dags"
    assert env["LAKEIVM_LAKE"] == "/opt/lakeivm/lake"


def test_lake_volume_is_shared_at_one_path():
    for service in AIRFLOW + SPARK:
        assert "lake:/opt/lakeivm/lake" in SERVICES[service]["volumes"], service
    assert "lake" in COMPOSE["volumes"]
    assert "./dags:/opt/lakeivm/dags:ro" in SERVICES["airflow-scheduler"]["volumes"]


def test_spark_master_url_matches_the_master_service():
    env = SERVICES["airflow-scheduler"]["environment"]
    port = SERVICES["spark-master"]["command"][SERVICES["spark-master"]["command"].index("--port") + 1]
    assert env["LAKEIVM_SPARK_MASTER"] == f"spark://spark-master:{port}"
    assert env["AIRFLOW_CONN_SPARK_DEFAULT"].startswith(f"spark://spark-master:{port}")
    assert SERVICES["spark-worker"]["command"][-1] == f"spark://spark-master:{port}"


def test_start_order_and_health():
    assert "pg_isready" in SERVICES["postgres"]["healthcheck"]["test"]
    for service in AIRFLOW[1:]:
        depends = SERVICES[service]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["airflow-init"]["condition"] == "service_completed_successfully"
    assert SERVICES["spark-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_long_running_services_restart_and_report_their_health():
    """Every service but the one-off init restarts unless stopped and has a healthcheck: the Airflow
    components by their job's heartbeat (``airflow jobs check``), the Spark ones by their port. Every
    Airflow container shares one [api] secret_key (the api-server signs its task-log requests with it)."""
    jobs = {"airflow-scheduler": "SchedulerJob", "airflow-dag-processor": "DagProcessorJob", "airflow-triggerer": "TriggererJob"}
    for name, service in SERVICES.items():
        if name == "airflow-init":
            assert service["restart"] == "on-failure"
            continue
        assert service["restart"] == "unless-stopped" and service["healthcheck"]["test"][0] == "CMD", name
        if name in jobs:
            assert service["healthcheck"]["test"][1:] == ["airflow", "jobs", "check", "--job-type", jobs[name], "--local"]
    assert all(SERVICES[s]["environment"]["AIRFLOW__API__SECRET_KEY"] for s in AIRFLOW)


def test_components_wait_for_a_healthy_apiserver():
    """The scheduler, dag-processor and triggerer use the api-server's Execution API: they start once
    its healthcheck passes (a trigger sent before then failed with ReadTimeout)."""
    check = SERVICES["airflow-apiserver"]["healthcheck"]["test"]
    assert check[0] == "CMD" and any(arg.endswith(":8080/api/v2/version") for arg in check)
    for service in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        assert SERVICES[service]["depends_on"]["airflow-apiserver"] == {"condition": "service_healthy"}, service
    assert "airflow-apiserver" not in SERVICES["airflow-init"].get("depends_on", {})


def test_published_ports_listen_on_loopback_only():
    published = {name: service["ports"] for name, service in SERVICES.items() if service.get("ports")}
    assert set(published) == {"airflow-apiserver", "spark-master", "spark-connect"}
    for name, ports in published.items():
        for port in ports:
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (name, port)
    assert "127.0.0.1:8080:8080" in published["airflow-apiserver"]
    assert "127.0.0.1:8081:8081" in published["spark-master"]
    assert not any(port.endswith(":7077") for port in published["spark-master"])  # the compose network's only
    assert "ports" not in SERVICES["postgres"]


def test_one_uid_writes_the_lake():
    """Airflow tasks, Spark executors and the Connect server write the same files: one uid and gid."""
    writers = lake_writers()
    assert set(AIRFLOW + SPARK) <= set(writers)
    for service in writers:
        assert SERVICES[service]["user"] == f"{LAKE_UID}:{LAKE_GID}", service
    for dockerfile in ("Dockerfile.airflow", "Dockerfile.spark"):
        stage = final_stage(dockerfile)
        users = [args for ins, args in stage if ins == "USER"]
        assert users[-1] == f"{LAKE_UID}:{LAKE_GID}", dockerfile
        # the lake folder is made in the image, owned by that user, so the named volume starts with it
        made = [args for ins, args in stage if ins == "RUN" and f"install -d -o {LAKE_UID} -g {LAKE_GID}" in args]
        assert any("/opt/lakeivm/lake" in args.split() for args in made), dockerfile
        assert set(users) <= {"root", f"{LAKE_UID}:{LAKE_GID}"}, dockerfile  # never Apache's `spark` (185)
    (useradd,) = [args for ins, args in final_stage("Dockerfile.spark") if ins == "RUN" and "useradd" in args]
    assert f"--uid {LAKE_UID} --gid {LAKE_GID}" in useradd


def test_one_python_path_in_both_images():
    """Executors run the Python the driver names: the same path, Python 3.11 with lakeivm, in both images."""
    assert PYPROJECT["project"]["requires-python"] == ">=3.11,<3.12"
    assert instructions("Dockerfile.airflow")[-1][0][1] == "apache/airflow:3.3.2-python3.11"
    assert instructions("Dockerfile.spark")[-1][0][1].startswith("python:3.11-")  # not Apache's Ubuntu python3
    conf = dict(line.split(None, 1) for line in (DOCKER / "spark-defaults.conf").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert conf["spark.pyspark.python"].strip() == PYTHON
    for dockerfile in ("Dockerfile.airflow", "Dockerfile.spark"):
        stage = final_stage(dockerfile)
        env = env_of(stage)
        assert env["PYSPARK_PYTHON"] == PYTHON, dockerfile
        assert f"docker/spark-defaults.conf {env['SPARK_CONF_DIR']}/spark-defaults.conf" in \
            [args for ins, args in stage if ins == "COPY"], dockerfile
        # the path is made after lakeivm is installed, by the script that checks it runs 3.11 with lakeivm
        made = index_of(stage, "RUN", "sh /opt/lakeivm/python-path.sh")
        assert index_of(stage, "RUN", "pip install") <= made, dockerfile
    script = (DOCKER / "python-path.sh").read_text()
    assert f"> {PYTHON}\n" in script and "sys.version_info[:2] == (3, 11)" in script and "import sys, lakeivm" in script
    for service in AIRFLOW + SPARK:
        assert SERVICES[service]["environment"]["PYSPARK_PYTHON"] == PYTHON, service
    assert SERVICES["spark-connect"]["command"][0] == PYTHON


def test_images_install_with_airflows_constraints():
    airflow = pinned_version("apache-airflow")
    url = f"https://raw.githubusercontent.com/apache/airflow/constraints-{airflow}/constraints-3.11.txt"
    for dockerfile in ("Dockerfile.airflow", "Dockerfile.spark"):
        wheel = instructions(dockerfile)[-2]
        assert ("ARG", f"AIRFLOW_CONSTRAINTS={url}") in wheel, dockerfile
        assert any("docker/airflow_constraints.py \"$AIRFLOW_CONSTRAINTS\"" in args and "> /dist/constraints.txt" in args
                   for ins, args in wheel if ins == "RUN"), dockerfile
        (install,) = [words for words in pip_commands(dockerfile) if words[1] == "install"]
        if dockerfile == "Dockerfile.airflow":  # Airflow's docs: apache-airflow named at its version so pip never moves it
            assert f"apache-airflow=={airflow}" in install and "${wheel}[airflow,bench]" in install
        else:  # a Spark node: lakeivm without its extras, so no Airflow, Great Expectations or plotting
            assert not any(word.startswith(("apache-airflow", "great-expectations")) or "[" in word for word in install)
        assert install[install.index("--constraint") + 1] == "/tmp/lakeivm-dist/constraints.txt", dockerfile
        assert index_of(final_stage(dockerfile), "COPY", "--from=wheel") < index_of(final_stage(dockerfile), "RUN", "pip install")


def test_constraints_yield_to_lakeivms_own_pins():
    """lakeivm pins exact versions Airflow's constraints pin differently: those lines are dropped."""
    script = _load("airflow_constraints")
    names = script.pinned((REPO_ROOT / "pyproject.toml").read_text())  # the extras' pins too
    assert {"apache-airflow", "numpy", "pandas", "pyarrow", "pyyaml", "apache-airflow-providers-apache-spark"} <= names
    assert "lakeivm" not in names  # the dev extra names lakeivm[airflow,bench]: never a constraint of its own
    constraints = ("# comment naming numpy==1.0\nPyYAML==6.0.2\nnumpy==1.26.4\nattrs==25.3.0\n"
                   "apache_airflow_providers_apache_spark==5.3.0\nFlask==2.2.5\n")
    kept, dropped = script.without(constraints, names)
    assert dropped == ["PyYAML==6.0.2", "numpy==1.26.4", "apache_airflow_providers_apache_spark==5.3.0"]
    assert kept == "# comment naming numpy==1.0\nattrs==25.3.0\nFlask==2.2.5\n"


def test_images_install_the_wheel_the_install_test_builds():
    """tests/test_install.py builds the wheel from the repo root and installs it (not editable) into a
    fresh environment; both images do the same: the build context is the repo root, copied whole,
    built into a wheel, and that wheel installed."""
    install_test = (REPO_ROOT / "tests" / "test_install.py").read_text()
    assert '"build"' in install_test and "cwd=REPO" in install_test and "lakeivm-*.whl" in install_test
    for service in AIRFLOW + ["spark-master"]:
        assert (REPO_ROOT / SERVICES[service]["build"]["context"]).resolve() == REPO_ROOT, service
    assert (REPO_ROOT / "pyproject.toml").exists()
    for dockerfile in ("Dockerfile.airflow", "Dockerfile.spark"):
        wheel = instructions(dockerfile)[-2]
        assert wheel[0] == ("FROM", "python:3.11-slim-bookworm AS wheel")
        assert ("COPY", ". /opt/lakeivm/src") in wheel, dockerfile
        commands = pip_commands(dockerfile)
        assert ["pip", "wheel", "--no-cache-dir", "--no-deps", "--wheel-dir", "/dist", "/opt/lakeivm/src"] in commands
        (install,) = [words for words in commands if words[1] == "install"]
        wheel_file = "/tmp/lakeivm-dist/lakeivm-*.whl"
        named = wheel_file in install or ("${wheel}[airflow,bench]" in install and any(
            ins == "RUN" and f"wheel=$(ls {wheel_file})" in args for ins, args in final_stage(dockerfile)))
        assert named and "/opt/lakeivm/src" not in install, dockerfile
        for words in commands:
            assert "-e" not in words and "--editable" not in words, (dockerfile, words)
    # the two images build the wheel identically (the Airflow image installs it with its extras)
    assert instructions("Dockerfile.airflow")[-2] == instructions("Dockerfile.spark")[-2]
    (airflow,), (spark,) = ([w for w in pip_commands(d) if w[1] == "install"] for d in ("Dockerfile.airflow", "Dockerfile.spark"))
    assert airflow[-2:] == spark[-2:] == ["--constraint", "/tmp/lakeivm-dist/constraints.txt"]  # held to the same versions
    # nothing the wheel is built from is left out of the build context
    ignored = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"], "docker", *PYPROJECT["tool"]["setuptools"]["package-dir"].values()}
    assert not needed & ignored and ".venv" in ignored and "**/*.egg-info" in ignored


def test_jars_are_fetched_into_a_fixed_folder_at_build_time():
    from lakeivm.config import _ENV

    assert _ENV["jars"] == "LAKEIVM_JARS"
    for dockerfile in ("Dockerfile.airflow", "Dockerfile.spark"):
        stage = final_stage(dockerfile)
        assert env_of(stage)["LAKEIVM_JARS"] == JARS, dockerfile
        fetch = index_of(stage, "RUN", "python -m lakeivm.spark --fetch-jars")
        assert index_of(stage, "ENV", f"LAKEIVM_JARS={JARS}") < fetch, dockerfile
        # fetched as the user that reads them at run time, into a folder that user owns
        user = max(i for i, (ins, _) in enumerate(stage) if ins == "USER")
        assert user < fetch and stage[user][1] == f"{LAKE_UID}:{LAKE_GID}", dockerfile
        assert any(ins == "RUN" and f"install -d -o {LAKE_UID} -g {LAKE_GID}" in args and JARS in args.split()
                   for ins, args in stage), dockerfile


def test_connect_service_wiring():
    connect = SERVICES["spark-connect"]
    command = connect["command"]
    assert command[:2] == [PYTHON, "/opt/lakeivm/connect_server.py"]
    assert ("COPY", "docker/connect_server.py /opt/lakeivm/connect_server.py") in final_stage("Dockerfile.spark")
    master_port = SERVICES["spark-master"]["command"][SERVICES["spark-master"]["command"].index("--port") + 1]
    assert command[command.index("--master") + 1] == f"spark://spark-master:{master_port}"
    assert command[command.index("--driver-host") + 1] == "spark-connect"
    port = int(command[command.index("--port") + 1])
    assert connect["image"] == SERVICES["spark-master"]["image"] == SERVICES["spark-worker"]["image"]
    assert connect["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert f"/dev/tcp/localhost/{port}" in " ".join(connect["healthcheck"]["test"])
    assert f"127.0.0.1:{port}:{port}" in connect["ports"] and f"127.0.0.1:{port + 1}:{port + 1}" in connect["ports"]
    env = SERVICES["airflow-scheduler"]["environment"]
    assert env["LAKEIVM_SPARK_REMOTE"] == f"sc://spark-connect:{port}"
    assert json.loads(env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]) == {"conn_type": "spark_connect", "host": "spark-connect", "port": port}
    assert SERVICES["airflow-scheduler"]["depends_on"]["spark-connect"]["condition"] == "service_healthy"


def test_connect_server_command_matches_lakeivm_spark_start(tmp_path):
    """docker/connect_server.py runs the server `lakeivm spark start` runs (lakeivm.infra.server), in the
    foreground: the same server class, Delta's JARs as files, the UI on the next port."""
    from lakeivm.config import Settings
    from lakeivm.infra.server import SERVER_CLASS
    from lakeivm.spark import MANIFEST, STATIC_CONF

    (tmp_path / "delta.jar").write_text("")  # a jars folder that needs no fetching
    (tmp_path / MANIFEST).write_text("delta.jar\n")
    argv = _load("connect_server").command(Settings(jars=str(tmp_path)), "spark://spark-master:7077", 15002,
                                           "spark-connect", PYTHON, "/opt/spark")
    assert argv[:5] == ["/opt/spark/bin/spark-submit", "--class", SERVER_CLASS, "--master", "spark://spark-master:7077"]
    assert argv[-1] == "spark-internal"
    conf = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "--conf")
    assert conf["spark.jars"] == str(tmp_path / "delta.jar")
    assert conf["spark.connect.grpc.binding.port"] == "15002" and conf["spark.ui.port"] == "15003"
    assert conf["spark.pyspark.python"] == PYTHON and conf["spark.driver.host"] == "spark-connect"
    assert all(conf[key] == value for key, value in STATIC_CONF.items())
    assert "--driver-memory" not in argv and conf.get("spark.ui.enabled") == "true"  # no local-machine settings
