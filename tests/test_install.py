"""The package works installed: a wheel in a fresh venv runs the CLI, the DAG file and a refresh.

Everything runs from a working directory outside the source tree, with an environment stripped of
the test process's lakeivm, Airflow and Spark settings, so nothing resolves through the checkout:
the JSON schemas, the shipped views, the refresh job and the DAG file must come from the wheel.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install, pytest.mark.spark,  # spark: the refresh runs Spark (in the installed venv)
              pytest.mark.xdist_group("install")]  # one worker builds the venv (make test: --dist loadgroup)

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"  # installed into .venv by `make setup`
MAPPED = ("schemas", "dags", "jobs")  # top-level folders installed as lakeivm.<folder> (pyproject's package-dir)
_DROPPED = ("LAKEIVM_", "AIRFLOW", "SPARK_", "PYSPARK_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(run, package)``: run a command of a fresh venv holding the wheel; the installed package's folder."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run([str(UV), "build", "--quiet", "--out-dir", str(root / "dist")], cwd=REPO, check=True)
    (wheel,) = (root / "dist").glob("lakeivm-*.whl")
    return _venv(root, wheel, "[airflow,bench]")


@pytest.fixture(scope="module")
def lean(installed, tmp_path_factory):
    """``(run, package)`` of a venv holding the wheel without its extras: what a Spark node installs."""
    run, package = installed
    (wheel,) = (package.parents[4] / "dist").glob("lakeivm-*.whl")  # <root>/venv/lib/python3.11/site-packages/lakeivm
    return _venv(tmp_path_factory.mktemp("lean"), wheel, "")


def _venv(root: Path, wheel: Path, extras: str):
    venv = root / "venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", "3.11", str(venv)], check=True)
    _install(venv, f"{wheel}{extras}")
    work = root / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    env.update({"AIRFLOW_HOME": str(root / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})

    def run(*command: str, timeout: float = 600, code: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run([str(venv / "bin" / command[0]), *command[1:]], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == code, f"{command} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    package = Path(run("python", "-c", "import lakeivm, os; print(os.path.dirname(lakeivm.__file__))").stdout.strip())
    assert package.is_relative_to(venv), package
    return run, package


def test_a_lean_install_runs_views_and_names_the_extra_a_command_needs(lean):
    run, _ = lean  # no Airflow, Great Expectations, matplotlib or tpchgen-cli: a Spark node's install
    probe = ("import importlib.util as u, lakeivm.api, lakeivm.run.engine, lakeivm.views.kinds\n"
             "print([m for m in ('airflow', 'great_expectations', 'matplotlib') if u.find_spec(m)])")
    assert run("python", "-c", probe).stdout.split()[-1] == "[]"
    assert "refresh" in run("lakeivm", "--help").stdout
    assert "pip install 'lakeivm[airflow]'" in run("lakeivm", "demo", code=2).stderr
    assert "pip install 'lakeivm[bench]'" in run("lakeivm", "bench", "pipeline", code=2).stderr
    assert "pip install 'lakeivm[bench]'" in run("lakeivm", "--lake", "lake", "datagen", "tpch", code=2).stderr


def test_cli_and_refresh_job_start(installed):
    run, package = installed
    assert "datagen" in run("lakeivm", "--help").stdout
    assert "--validate" in run("python", str(package / "jobs" / "refresh.py"), "--help").stdout


def test_every_package_of_the_source_tree_is_installed(installed):
    _, package = installed  # a package left out of pyproject's list fails only when its code first runs
    source = REPO / "lib" / "lakeivm"
    expected = [str(init.parent.relative_to(source)) for init in source.rglob("__init__.py")]
    expected += [folder for folder in MAPPED if (REPO / folder / "__init__.py").is_file()]
    assert sorted(str(init.parent.relative_to(package)) for init in package.rglob("__init__.py")) == sorted(expected)


def test_every_data_file_of_the_source_tree_is_installed(installed):
    """The files read at run time (Ivy and log4j settings, the job and DAG files, the JSON schemas,
    the shipped views) are in the wheel: a pattern missing from pyproject's package-data fails here,
    not in a user's first session (the Spark run of the installed wheel is under -m slow)."""
    _, package = installed
    tracked = subprocess.run(["git", "ls-files", "lib/lakeivm", *MAPPED], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    read_as_files = [f for f in tracked if not f.endswith(".py") or f.startswith(("jobs/", "dags/"))]
    missing = sorted(f for f in read_as_files if not (package / f.removeprefix("lib/lakeivm/")).is_file())  # a MAPPED folder is lakeivm/<folder>
    assert read_as_files and not missing, f"not in the wheel: {missing}"


def test_shipped_dag_file_parses(installed):
    run, package = installed
    probe = ("import sys\n"
             "from airflow.dag_processing.dagbag import DagBag\n"
             f"bag = DagBag(dag_folder={str(package / 'dags')!r})\n"
             "assert not bag.import_errors, bag.import_errors\n"
             "print(' '.join(sorted(bag.dag_ids)))\n")  # the last line: Airflow logs to stdout too
    dag_ids = run("python", "-c", probe).stdout.splitlines()[-1].split()
    shipped = sorted(f"lakeivm__{path.stem}" for path in (package / "schemas" / "views").glob("*.yaml"))
    derived = ["lakeivm__customer_distribution__c_orders"]  # its aggregating derived table, a view (and a DAG) of its own
    assert "lakeivm__revenue_by_nation" in dag_ids and dag_ids == sorted(shipped + derived)


@pytest.mark.slow  # 73 s alone, ~2 min in the suite: the installed files are checked above, a refresh everywhere else
def test_datagen_refresh_audit(installed):
    run, _ = installed  # the first session gets Delta's JARs itself: no set-up command needed
    # The three commands in one process (one JVM start instead of three; `lakeivm --help` runs the script itself).
    # Only the four tables the view reads are generated (`--tpch-tables`): each table more is a Delta
    # write in a cold JVM, and the installed code that writes them is the same.
    script = ("import sys\n"
              "from lakeivm.cli import main\n"
              "for command in (['datagen', 'tpch', '--scale', '0.001', '--tpch-tables', 'customer,orders,lineitem,nation'],\n"
              "                ['refresh', 'revenue_by_nation'], ['audit', 'revenue_by_nation']):\n"
              "    print('$ lakeivm', *command, flush=True)\n"
              "    assert main(['--lake', 'lake', *command]) == 0, command\n")
    out = run("python", "-c", script).stdout
    refreshed, audited = out.split("$ lakeivm refresh")[1].split("$ lakeivm audit")
    assert "run #1 bootstrap" in refreshed and "no difference" in audited


def _install(venv: Path, wheel: str) -> None:
    """Install the wheel and its pinned dependencies from uv's cache (filled by `make setup`), else PyPI.

    Online, uv re-downloads and rebuilds pyspark's sdist each time (~25 s); offline takes ~1 s.
    """
    command = [str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), wheel]
    if subprocess.run([*command, "--offline"], capture_output=True).returncode != 0:
        subprocess.run(command, check=True)
