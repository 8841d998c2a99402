"""The JVM options every Spark JVM of lakeivm gets (no JVM started here but in a child process, once)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from lakeivm import spark as spark_module
from lakeivm.config import Settings
from lakeivm.errors import LakeIVMError


def test_a_dumped_class_archive_is_mapped_before_the_users_own_options(tmp_path, monkeypatch):
    archive = tmp_path / "spark.jsa"
    monkeypatch.setattr(spark_module, "class_archive", lambda: archive)
    monkeypatch.setattr(spark_module, "delta_jars", lambda settings: ["/jars/delta.jar"])
    settings = Settings(spark_conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:SharedArchiveFile=/mine.jsa"})

    assert "SharedArchiveFile" not in spark_module.jvm_conf(Settings()).get("spark.driver.extraJavaOptions", "")
    archive.write_bytes(b"")
    options = spark_module.jvm_conf(settings)["spark.driver.extraJavaOptions"].split()
    assert options[0] == f"-XX:SharedArchiveFile={archive}" and "-Xshare:auto" in options and "-Xlog:cds=off" in options
    assert options[-2:] == ["-XX:+UseSerialGC", "-XX:SharedArchiveFile=/mine.jsa"]  # the JVM takes the last one given: the user's
    assert spark_module.jvm_conf(Settings())["spark.driver.extraJavaOptions"].startswith("-XX:SharedArchiveFile=")


def test_the_archive_is_named_by_this_pyspark_install():
    import pyspark

    name = spark_module.class_archive().name
    assert name.startswith(f"spark-{pyspark.__version__}-") and name.endswith(".jsa")


def test_executors_of_a_cluster_map_the_archive_too(tmp_path, monkeypatch):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"")
    monkeypatch.setattr(spark_module, "class_archive", lambda: archive)
    monkeypatch.setattr(spark_module, "delta_jars", lambda settings: ["/jars/delta.jar"])
    conf = spark_module.jvm_conf(Settings(spark_master="spark://127.0.0.1:7077"))
    assert conf["spark.executor.extraJavaOptions"].startswith(f"-XX:SharedArchiveFile={archive} ")
    assert "spark.executor.extraJavaOptions" not in spark_module.jvm_conf(Settings(spark_master="local[1]"))


def test_archives_of_pyspark_installs_that_are_gone_are_pruned(tmp_path):
    live, gone, unnamed = (tmp_path / f"spark-4.2.0-{key}.jsa" for key in ("live", "gone", "old"))
    for archive in (live, gone, unnamed):
        archive.write_bytes(b"archive")
    (tmp_path / "spark-4.2.0-live.jars").write_text(str(tmp_path))  # a folder that exists
    (tmp_path / "spark-4.2.0-gone.jars").write_text(str(tmp_path / "removed-venv" / "jars"))
    keep = tmp_path / "spark-4.2.0-new.jsa"
    keep.write_bytes(b"archive")

    assert spark_module.prune_class_archives(keep) == [gone]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-4.2.0-live.jars", "spark-4.2.0-live.jsa", "spark-4.2.0-new.jsa",
                                                         "spark-4.2.0-old.jsa"]  # one dumped before the .jars files: kept


def test_more_packages_are_fetched_into_a_jar_folder_of_their_own(tmp_path, monkeypatch):
    from lakeivm.config import load_settings
    from lakeivm.infra.scheduling import _delta_jars_or_package
    from lakeivm.spark import DELTA_PACKAGE, jars_folder, packages

    monkeypatch.delenv("LAKEIVM_PACKAGES", raising=False)
    (tmp_path / "lakeivm.toml").write_text('packages = ["org.apache.hadoop:hadoop-aws:3.5.0"]\n')
    settings = load_settings(tmp_path / "lakeivm.toml")
    assert packages(settings) == [DELTA_PACKAGE, "org.apache.hadoop:hadoop-aws:3.5.0"]
    assert jars_folder(settings).name.startswith(jars_folder(Settings()).name + "+")  # Delta's alone stays where it was
    monkeypatch.setenv("LAKEIVM_PACKAGES", "a:b:1, c:d:2,a:b:1")
    assert packages(load_settings(tmp_path / "absent.toml"))[1:] == ["a:b:1", "c:d:2"]
    unfetched = Settings(jars=str(tmp_path / "nothing-fetched"), packages="a:b:1")  # spark-submit resolves them then
    assert _delta_jars_or_package(unfetched) == {"packages": f"{DELTA_PACKAGE},a:b:1"}


def test_a_remote_where_no_server_listens_is_refused_at_once_naming_the_fix():
    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    with pytest.raises(LakeIVMError, match="lakeivm spark start"):
        spark_module.connect(f"sc://127.0.0.1:{port}")
    assert time.perf_counter() - started < 10  # the client's own retries alone would take minutes


def test_a_session_in_this_process_shows_nothing_on_the_console(tmp_path):
    """The JVM's stderr reaches the console, but for its one line of its own at every start
    (``WARNING: Using incubator modules``, Spark 4.2's launcher adds the module) and the AWS SDK
    bundle's ``SLF4J:`` lines: a child process starting Spark in-process prints nothing else than what it prints."""
    script = ("from lakeivm.config import Settings\n"
              "from lakeivm.spark import get_spark\n"
              "spark = get_spark(Settings(lake='lake', spark_master='local[1]'))\n"
              "print(spark.range(3).count())\n"
              "spark.sparkContext._jvm.java.lang.System.err.println('SLF4J: Failed to load class \"org.slf4j.impl.StaticLoggerBinder\".')\n"
              "spark.sparkContext._jvm.java.lang.System.err.println('a line of the JVM')\n"  # still forwarded
              "import time; time.sleep(0.5)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("LAKEIVM_", "PYSPARK_GATEWAY"))})
    assert done.returncode == 0 and done.stdout.split() == ["3"], done.stderr[-3000:]
    assert done.stderr == "a line of the JVM\n", done.stderr


def test_the_connect_application_takes_half_the_alive_workers_cores_of_a_standalone_cluster():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from lakeivm.infra.server import cluster_share

    workers = [{"cores": 4, "state": "ALIVE"}, {"cores": 2, "state": "ALIVE"}, {"cores": 8, "state": "DEAD"}]

    class MasterUI(BaseHTTPRequestHandler):  # what a standalone master's web UI answers at /json/
        def do_GET(self):
            body = json.dumps({"url": "spark://127.0.0.1:7077", "workers": workers}).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ui = HTTPServer(("127.0.0.1", 0), MasterUI)
    threading.Thread(target=ui.serve_forever, daemon=True).start()
    try:
        assert cluster_share("spark://127.0.0.1:7077", ui.server_port) == 3
        workers[:] = [{"cores": 1, "state": "ALIVE"}]
        assert cluster_share("spark://127.0.0.1:7077", ui.server_port) == 1  # never none of a one-core cluster
    finally:
        ui.shutdown()
    assert cluster_share("spark://127.0.0.1:7077", ui.server_port) is None  # no answer: spark.cores.max left unset
