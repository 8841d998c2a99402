"""A SparkSession with Delta Lake configured: a Spark Connect client, or Spark in this process.

With ``spark_remote`` set (``sc://host:port``, the server ``lakeivm spark start`` runs) every caller
is a thin Spark Connect client: no JVM starts in the calling process. Otherwise Spark runs in this
process (``local[*]`` by default; the tests' fallback).

Delta's JARs are resolved from Maven Central once, at set-up (``python -m lakeivm.spark
--fetch-jars``), and copied into a folder of their own (``jars`` setting, default
``~/.cache/lakeivm/jars/<delta version>``). From then on every JVM -- in-process, the Connect server,
spark-submit -- loads those files directly (``spark.jars``): no Ivy, no network, no resolution report.
Set-up also dumps a class-data archive (AppCDS) of a Spark JVM that every JVM lakeivm starts maps
(``class_archive_options``): its classes are loaded from it instead of parsed and verified.
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lakeivm.config import Settings, cache_home, load_settings
from lakeivm.errors import LakeIVMError
from lakeivm.processes import listening as accepts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
MANIFEST = "jars.txt"

# JVM settings: fixed when a JVM starts (in-process session, Connect server, spark-submit).
STATIC_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.showConsoleProgress": "false",
    # Spark keeps the classes it generates for a query's operators and expressions in one cache of
    # 100 by default. A pipeline's runs use more than that between two runs of the same view: each
    # batch compiled them all again (Janino) and the JIT compiled the new classes again, the largest
    # share of the driver's CPU after the queries' own work (the pipeline-20k record in docs/benchmarks.md).
    "spark.sql.codegen.cache.maxEntries": "2000",
    # pyspark records the Python call site of every Column and DataFrame function call for Spark's
    # error context ("== DataFrame =="): four more py4j round trips each (the active session, a
    # setting, set and clear the origin), a large share of a run's round trips (the pipeline-20k
    # record). A run's error names its view and SQL without them (errors.analysed_as).
    # Static on a Connect server; its clients read it from there.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
# Session settings that matter for correctness or speed, applied on every master (and to each
# Connect session): UTC timestamps, small Delta snapshot reconstructions, adaptive execution.
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    # Constraint propagation over the deep unions of buffered deltas (views/state.py) trips a
    # Spark 4.2 analyzer bug ("key not found" in Union.rewriteConstraints); it only prunes filters.
    "spark.sql.constraintPropagation.enabled": "false",
    # Spark Connect keeps a local relation (a frame of this process's rows) of at least this size as
    # artifacts in the server's block manager for the session's whole life (1 MB by default in 4.2):
    # a long-lived session on a warm server kept every run's local deltas (~0.6 MB a run). Smaller
    # ones travel inside their plan and go with it; 64 MB stays under gRPC's 128 MB message limit.
    "spark.sql.session.localRelationCacheThreshold": str(64 * 1024 * 1024),
}
# Only for a JVM on this machine (in-process or the local Connect server).
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
    "spark.default.parallelism": "4",
}


def get_spark(settings: Settings | None = None, app_name: str = "lakeivm") -> SparkSession:
    """Return the active SparkSession, or build one with Delta configured.

    Example::

        spark = get_spark()
        spark.read.format("delta").load("lake/tables/orders")
    """
    settings = settings or load_settings()
    if settings.spark_remote:
        return connect(settings.spark_remote, settings)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if settings.spark_master.startswith("local"):  # no "hostname resolves to a loopback address" warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {"spark.master": settings.spark_master, **jvm_conf(settings)}
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --name (the view's) is kept
        conf["spark.app.name"] = app_name
    quiet = f"-Dlog4j2.configurationFile={files('lakeivm') / 'log4j2.properties'}"  # before setLogLevel can act
    conf["spark.driver.extraJavaOptions"] = f"{quiet} {conf.get('spark.driver.extraJavaOptions', '')}".strip()
    _start_jvm(conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines (one per closed connection) are not ours to show
    return spark


JVM_NOISE = (b"WARNING: Using incubator modules: jdk.incubator.vector",
             b"SLF4J: ")  # the AWS SDK bundle's shaded SLF4J finding no binding (s3a:// lakes): three lines a start


def _start_jvm(options: dict[str, str]) -> None:
    """Start this process's JVM as pyspark's session builder would (``launch_gateway`` of the same
    settings), its stderr forwarded line by line to ours but for JVM_NOISE: Spark 4.2's launcher adds
    ``--add-modules=jdk.incubator.vector`` to every JVM it starts, and the JVM announces it on stderr
    at every start, a line that is not lakeivm's to show; so are the AWS SDK bundle's SLF4J lines.
    Nothing to do under spark-submit (its JVM runs already) or when this process has a SparkContext."""
    from subprocess import PIPE

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": PIPE})
    threading.Thread(target=_forward_stderr, args=(gateway.proc.stderr,), name="lakeivm-jvm-stderr", daemon=True).start()
    SparkContext(conf=conf, gateway=gateway)  # the builder's getOrCreate takes it up


def _forward_stderr(stream) -> None:
    """Copy the JVM's stderr to this process's (file descriptor 2, where it went before), line by
    line, leaving out JVM_NOISE."""
    for line in iter(stream.readline, b""):
        if not line.rstrip().startswith(JVM_NOISE):
            os.write(2, line)


def connect(remote: str, settings: Settings | None = None, session_id: str | None = None) -> SparkSession:
    """A Spark Connect session at ``remote`` (``sc://host:port``), with the session settings applied.

    ``session_id`` (a UUID) attaches to that server-side session: the tasks of one DAG run share it.
    """
    from pyspark.sql import SparkSession

    quiet_client_logs()
    if not listening(remote, timeout=5.0):  # else the client retries for minutes before it says so
        raise LakeIVMError(_NO_SERVER.format(remote=remote))
    url = with_params(remote, session_id=session_id) if session_id else remote
    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
        spark.client.set_retry_policies([_bounded_retries()])
        for key, value in session_conf(settings or load_settings()).items():
            spark.conf.set(key, value)
    except Exception as err:  # grpc's UNAVAILABLE, through pyspark
        if "UNAVAILABLE" in str(err) or "Connection refused" in str(err):
            raise LakeIVMError(_NO_SERVER.format(remote=remote)) from err
        raise
    return spark


def _bounded_retries():
    """pyspark's retry policy with fewer retries: a call to an unreachable server gives up after
    about 25 s (backoffs of 0.05, 0.2, 0.8, 3.2, 10, 10 s) instead of pyspark's 10 minutes, so a run
    whose server died ends with the one line of ``errors.known_failure`` rather than hanging its
    task; a server restarted within that time is still met (its answer then says the session is gone)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=6, max_backoff=10_000)


_NO_SERVER = ("no Spark Connect server answers at {remote}: start one with `lakeivm spark start` "
              "or unset LAKEIVM_SPARK_REMOTE / spark_remote to run Spark in-process.")


def listening(remote: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``remote``'s host and port (``sc://host:port``)."""
    url = urlparse(remote)
    return accepts(url.hostname or "127.0.0.1", url.port or 15002, timeout)


def with_params(remote: str, **params: str) -> str:
    """``remote`` (``sc://host:port[/;k=v;...]``) with more parameters.

    >>> with_params("sc://h:15002/;token=x", session_id="s")
    'sc://h:15002/;token=x;session_id=s'
    """
    base, _, existing = remote.partition("/;")
    parts = [p for p in existing.split(";") if p] + [f"{k}={v}" for k, v in params.items()]
    return f"{base.rstrip('/')}/;{';'.join(parts)}"


def release_connect_session() -> None:
    """Stop this process's Spark Connect session, if any: before stopping the server it talks to (at
    exit the client would otherwise retry a release against a stopped server), and before a command
    exits (left open, grpc's threads can abort the exit: "terminate called without an active
    exception", SIGABRT -- seen once in tests/test_faults.py). Imports nothing if no session was made."""
    if "pyspark.sql.connect.session" not in sys.modules:
        return
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    active = RemoteSparkSession.getActiveSession()
    if active is not None:
        try:
            active.stop()
        except Exception:  # the server is gone: nothing left to release
            pass


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def interrupted_after(spark: SparkSession, seconds: float, tag: str) -> Iterator[threading.Event]:
    """Run the block's Spark operations, interrupting them once ``seconds`` have passed (they then
    raise); yields an event set once it interrupted, so that the block's own failure is told apart
    from the interruption. Over Connect by an operation tag; in a local session by a job group
    cancelled with interrupt-on-cancel (classic sessions do not attach tags to the jobs of a write).
    Past the limit it cancels every 0.2 s until the block exits, so an operation that starts late is
    stopped too."""
    if is_connect(spark):
        spark.addTag(tag)
        cancel, reset = (lambda: spark.interruptTag(tag)), (lambda: spark.removeTag(tag))
    else:
        context = spark.sparkContext
        context.setJobGroup(tag, "lakeivm: interrupted after a limit", interruptOnCancel=True)

        def cancel() -> None:
            context.cancelJobGroup(tag)

        def reset() -> None:
            for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
                context.setLocalProperty(key, None)
    done, fired = threading.Event(), threading.Event()

    def interrupter() -> None:
        # A cancel reaches only the operations running at that moment: one still being planned when
        # the limit passes (Delta snapshots, analysis) starts later, so cancel until the block exits.
        if not done.wait(seconds):
            fired.set()
            try:
                cancel()
                while not done.wait(0.2):
                    cancel()
            except Exception:  # noqa: BLE001 -- the session is gone (its Connect server died or restarted):
                return  # the block's operation fails on its own, and says why; a thread's traceback would not

    thread = threading.Thread(target=interrupter, name=f"{tag}-interrupter", daemon=True)
    thread.start()
    try:
        yield fired
    finally:
        done.set()
        thread.join()
        reset()


def cancelled(err: BaseException) -> bool:
    """Whether a Spark error is a cancellation (a job group cancelled in a local session, an
    interrupted operation over Connect), as ``interrupted_after`` causes, not a failure of its own."""
    text = str(err).lower()
    return "cancel" in text or "interrupt" in text


def deployment(spark: SparkSession) -> str:
    """Where runs on ``spark`` execute: ``connect`` (a long-lived server), ``local`` (a JVM in this
    process) or ``cluster`` (this process's driver in front of a cluster). Costs differ per deployment."""
    if is_connect(spark):
        return "connect"
    return "local" if spark.sparkContext.master.startswith("local") else "cluster"


def session_conf(settings: Settings) -> dict[str, str]:
    """The per-session settings: SESSION_CONF, shuffle partitions, the user's own SQL settings."""
    extra = {k: str(v) for k, v in settings.spark_conf.items() if k.startswith("spark.sql.") or k.startswith("spark.databricks.")}
    return {**SESSION_CONF, "spark.sql.shuffle.partitions": str(settings.shuffle_partitions), **extra}


def jvm_conf(settings: Settings, local: bool | None = None) -> dict[str, str]:
    """Every setting a new JVM of lakeivm's gets: Delta's JARs as files, Delta's extension, the
    session settings, the local-machine settings when the master is local, the user's extras."""
    local = settings.spark_master.startswith("local") if local is None else local
    conf = {"spark.jars": ",".join(delta_jars(settings)), **STATIC_CONF, **session_conf(settings)}
    if local:
        conf.update(LOCAL_CONF)
    conf.update({k: str(v) for k, v in settings.spark_conf.items()})
    shared = class_archive_options()
    # First, so that a user's own -XX:SharedArchiveFile (the last one given) wins. Executors too: on a
    # standalone worker of this machine they run the same class path; elsewhere the file is missing
    # and the JVM goes without it.
    if shared:
        for key in ["spark.driver.extraJavaOptions"] + ([] if local else ["spark.executor.extraJavaOptions"]):
            conf[key] = f"{shared} {conf.get(key, '')}".strip()
    return conf


# The JVM's log tags of class-data sharing, silenced: a stale archive (pyspark or the JDK reinstalled)
# is then simply not used, instead of a warning on every start.
_CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def class_archive() -> Path:
    """Where set-up dumps the class-data archive (AppCDS) of a Spark JVM of this pyspark install.

    The archive records the absolute class path (pyspark's ``jars`` folder), so the folder is in its
    name; a JVM whose JDK or JAR files differ from the dump's ignores it."""
    import pyspark

    key = hashlib.sha1(str(pyspark_jars()).encode()).hexdigest()[:12]
    return cache_home() / "cds" / f"spark-{pyspark.__version__}-{key}.jsa"


def class_archive_options() -> str:
    """The JVM options that map the class-data archive, if set-up dumped one; else "".

    A cold Spark JVM then loads its classes from the archive instead of parsing and verifying them,
    which takes a large share of a cold start's CPU (docs/benchmarks.md#other-measurements)."""
    archive = class_archive()
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto {_CDS_QUIET}" if archive.exists() else ""


def check_delta(spark: SparkSession) -> str:
    """Write a small Delta table, MERGE into it and read its change data feed: what set-up checks."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        spark.range(100).selectExpr("id", "id % 7 AS g").write.format("delta").option("delta.enableChangeDataFeed", "true").save(folder)
        spark.sql(f"MERGE INTO delta.`{folder}` t USING (SELECT 3L AS id, 1L AS g) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET g = s.g")
        changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(folder)
        rows = sum(row["count"] for row in changes.groupBy("g").count().collect())
    return f"Spark {spark.version} with {DELTA_PACKAGE}: Delta write, MERGE and change data feed read ok ({rows} change rows)"


def dump_class_archive(settings: Settings) -> tuple[Path | None, str | None]:
    """Dump the class-data archive (set-up): a throw-away local JVM runs ``check_delta`` with
    ``-XX:ArchiveClassesAtExit`` and writes the archive as it exits. (the archive or None, the check's line or None)."""
    import subprocess

    archive = class_archive()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    script = (
        "from lakeivm.config import load_settings\n"
        "from lakeivm.spark import check_delta, get_spark\n"
        f"conf = {{'spark.driver.extraJavaOptions': {f'-XX:ArchiveClassesAtExit={partial} {_CDS_QUIET}'!r}}}\n"
        f"spark = get_spark(load_settings().with_(spark_master='local[1]', spark_remote='', jars={settings.jars!r}, spark_conf=conf))\n"
        "print('CHECK=' + check_delta(spark), flush=True)\n"
        "proc = spark.sparkContext._gateway.proc\n"
        "spark.stop()\n"
        "proc.stdin.close()  # the JVM exits on EOF, and writes the archive as it exits\n"
        "proc.wait(timeout=600)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    check = next((line[6:] for line in run.stdout.splitlines() if line.startswith("CHECK=")), None)
    if run.returncode or not partial.exists():
        partial.unlink(missing_ok=True)
        print("lakeivm: no class-data archive written (JVMs start slower without it):\n"
              + "\n".join(run.stderr.strip().splitlines()[-5:]), file=sys.stderr)
        return None, check
    partial.replace(archive)
    archive.with_suffix(".jars").write_text(str(pyspark_jars()))
    prune_class_archives(archive)
    return archive, check


def pyspark_jars() -> Path:
    """pyspark's ``jars`` folder: the class path a class-data archive records."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def prune_class_archives(keep: Path) -> list[Path]:
    """Delete the class-data archives (194 MB each) of pyspark installs that are gone -- a removed
    venv or checkout -- named by the ``.jars`` file set-up writes beside each; returns them."""
    pruned = []
    for named in keep.parent.glob("spark-*.jars"):
        archive = named.with_suffix(".jsa")
        if archive != keep and not Path(named.read_text().strip()).is_dir():
            archive.unlink(missing_ok=True)
            named.unlink()
            pruned.append(archive)
    return pruned


def packages(settings: Settings) -> list[str]:
    """The Maven packages every JVM of lakeivm's loads: Delta's, then the ``packages`` setting's."""
    return [DELTA_PACKAGE, *dict.fromkeys(p.strip() for p in settings.packages.split(",") if p.strip())]


def jars_folder(settings: Settings) -> Path:
    """Where the JARs are kept (the ``jars`` setting, or a folder per Delta version, and per set of
    further ``packages``, under ~/.cache)."""
    if settings.jars:
        return Path(settings.jars).expanduser()
    name, extra = DELTA_PACKAGE.replace(":", "_"), packages(settings)[1:]
    if extra:
        name += "+" + hashlib.sha1(",".join(sorted(extra)).encode()).hexdigest()[:10]
    return cache_home() / "jars" / name


def delta_jars(settings: Settings) -> list[str]:
    """The JAR files of Delta and the ``packages`` setting with their dependencies, fetched once if
    not there yet."""
    folder = jars_folder(settings)
    manifest = folder / MANIFEST
    if manifest.exists():
        names = manifest.read_text().split()
        if names and all((folder / n).exists() for n in names):
            return [str(folder / n) for n in names]
    wanted = packages(settings)
    print(f"lakeivm: fetching the JARs of {', '.join(wanted)} into {folder} (once)", file=sys.stderr, flush=True)
    return fetch_jars(folder, wanted)


def fetch_jars(folder: Path, wanted: list[str]) -> list[str]:
    """Resolve the ``wanted`` Maven packages with Ivy (Maven Central only, shipped ivysettings.xml) in
    a throw-away JVM and copy the resolved files into ``folder`` with a manifest."""
    import subprocess

    coordinates = ",".join(wanted)
    script = (
        "from pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.master('local[1]').config('spark.jars.packages', {coordinates!r})"
        f".config('spark.jars.ivySettings', {str(files('lakeivm') / 'ivysettings.xml')!r})"
        ".config('spark.ui.enabled', 'false').getOrCreate()\n"
        "print('JARS=' + s.sparkContext.getConf().get('spark.jars'))\n"
        "s.stop()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    found = [line[5:] for line in run.stdout.splitlines() if line.startswith("JARS=")]
    if run.returncode or not found:
        raise LakeIVMError(f"could not resolve {coordinates} from Maven Central (is the network up? is each "
                           "package's group:artifact:version right?):\n"
                           + "\n".join(run.stderr.strip().splitlines()[-15:]))
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for uri in filter(None, found[0].split(",")):
        source = Path(uri.removeprefix("file://").removeprefix("file:"))
        shutil.copy2(source, folder / source.name)
        names.append(source.name)
    (folder / MANIFEST).write_text("\n".join(names) + "\n")
    return [str(folder / n) for n in names]


def quiet_client_logs() -> None:
    """Keep the console to lakeivm's own lines: pyspark's Connect client logs every server error
    (with its JVM stack trace) before raising it; the raised error carries the same text. The Connect
    client's own logger has a level of its own (so "pyspark" does not cover it) and is merely disabled,
    which a logging config such as Airflow's (``disable_existing_loggers: False``) undoes: then a
    session stopped with its result releases in flight printed "ReleaseExecute failed" warnings.
    Its warning that a call ran out of retries goes too: the error raised after it says more."""
    for name in ("pyspark", "py4j", "SQLQueryContextLogger", "pyspark.sql.connect.logging"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")


def main(argv: list[str] | None = None) -> None:
    """Fetch Delta's JARs once (set-up), then start a session from those files and check Delta works."""
    parser = argparse.ArgumentParser(prog="python -m lakeivm.spark")
    parser.add_argument("--fetch-jars", action="store_true", help="fetch Delta's JARs if missing, then check a session")
    parser.parse_args(argv)
    settings = load_settings().with_(spark_master="local[1]", spark_remote="")
    jars = delta_jars(settings)
    print(f"Delta's JARs: {len(jars)} files in {jars_folder(settings)}")
    archive, check = class_archive(), None
    if not archive.exists():  # the check runs in the JVM that dumps it: one cold JVM at set-up, not two
        archive, check = dump_class_archive(settings)
    if check is None:
        spark = get_spark(settings)
        check = check_delta(spark)
        spark.stop()
    print(check)
    if archive is not None:
        print(f"class-data archive of a Spark JVM (faster cold starts): {archive}")


if __name__ == "__main__":
    main()
