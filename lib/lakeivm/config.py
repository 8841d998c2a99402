"""Settings: lake root, Spark master, views folder, lease, limits -- from env vars and an optional lakeivm.toml.

The views folder defaults to the example views shipped in the package (``SHIPPED_VIEWS``).

Precedence: environment (LAKEIVM_*) over ``lakeivm.toml`` in the working directory over defaults.

Example lakeivm.toml::

    lake = "s3a://bucket/lake"
    spark_master = "spark://spark-master:7077"
    views = "/opt/lakeivm/views"
    spark_remote = "sc://127.0.0.1:15002"   # a Spark Connect server (`lakeivm spark start`)
    lease_seconds = 120                      # a run's claim on its view lapses this long after its last heartbeat

    [spark_conf]                             # extra Spark settings, on every master
    "spark.executor.memory" = "8g"

    [limits]                                 # local-vs-Spark thresholds (lakeivm.limits.Limits)
    small_delta_rows = 50_000                # also LAKEIVM_LIMIT_SMALL_DELTA_ROWS=50000

    deadline_notifier = "airflow.providers.slack.notifications.slack_webhook.SlackWebhookNotifier"
    [deadline_notifier_kwargs]               # the notifier's own arguments
    text = "lakeivm: view {view} missed its {deadline_s} s deadline"
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, replace
from importlib.resources import files
from pathlib import Path

from lakeivm.limits import Limits, limits_from

SCHEMAS = Path(str(files("lakeivm.schemas")))  # package data: view.schema.json, system/*.json, example views
SHIPPED_VIEWS = SCHEMAS / "views"
_ENV = {"lake": "LAKEIVM_LAKE", "spark_master": "LAKEIVM_SPARK_MASTER", "views": "LAKEIVM_VIEWS",
        "spark_remote": "LAKEIVM_SPARK_REMOTE", "jars": "LAKEIVM_JARS", "packages": "LAKEIVM_PACKAGES",
        "lease_seconds": "LAKEIVM_LEASE_SECONDS"}
DEFAULT_REMOTE = "sc://127.0.0.1:15002"  # where ``lakeivm spark start`` listens by default
LEASE_SECONDS = 120.0  # the default lease_seconds (lakeivm.store.commit.Lease)


@dataclass(frozen=True)
class Settings:
    """Where the lake lives, which Spark to use, where view specs are read from."""

    lake: str = "lake"
    spark_master: str = "local[*]"
    views: str = str(SHIPPED_VIEWS)
    shuffle_partitions: int = 4
    spark_remote: str = ""  # sc://host:port of a Spark Connect server (``lakeivm spark start``); empty: no server
    jars: str = ""  # folder of Delta's JARs (default: ~/.cache/lakeivm/jars/<delta version>)
    packages: str = ""  # more Maven packages for every JVM, comma-separated (hadoop-aws for s3a://): fetched once beside Delta's
    spark_conf: dict = field(default_factory=dict, hash=False)  # extra Spark settings ([spark_conf] in lakeivm.toml)
    lease_seconds: float = LEASE_SECONDS  # a claim whose heartbeat is this old may be taken over (commit.Lease)
    limits: Limits = Limits()  # up to which sizes a run works in its own process rather than on Spark ([limits], LAKEIVM_LIMIT_*)
    connect_cores: int = 0  # cores of a standalone cluster the Connect server's application takes (spark.cores.max); 0: half
    deadline_notifier: str = ""  # dotted path of an Airflow notifier (or async callable) a missed deadline calls; "": a log line
    deadline_notifier_kwargs: dict = field(default_factory=dict, hash=False)  # its arguments; "{view}", "{deadline_s}" filled in

    @property
    def in_process(self) -> bool:
        """True when Spark runs inside the calling process (local mode, no Connect server)."""
        return not self.spark_remote and self.spark_master.startswith("local")

    def with_(self, **changes: object) -> Settings:
        """A copy with some fields replaced."""
        return replace(self, **changes)


def cache_home() -> Path:
    """Where lakeivm keeps what it can fetch or compute again (``~/.cache/lakeivm``): Delta's JARs, the
    class-data archive, the kept specs."""
    return Path.home() / ".cache" / "lakeivm"


def lakeivm_home() -> Path:
    """lakeivm's own folder on this machine (``LAKEIVM_HOME``, default ``~/.lakeivm``): the Connect
    server's pid file and log, kept error traces."""
    return Path(os.environ.get("LAKEIVM_HOME", Path.home() / ".lakeivm")).expanduser()


def load_settings(config_file: str | os.PathLike[str] = "lakeivm.toml") -> Settings:
    """Read settings from the environment and, if present, ``lakeivm.toml``."""
    values: dict[str, object] = {}
    path = Path(config_file)
    if path.exists():
        with path.open("rb") as handle:
            values.update(tomllib.load(handle))
    for field, var in _ENV.items():
        if os.environ.get(var):
            values[field] = os.environ[var]
    if "lease_seconds" in values:
        values["lease_seconds"] = _seconds(values["lease_seconds"], path)
    values["limits"] = limits_from(values.get("limits", {}), os.environ, str(path))
    if isinstance(values.get("packages"), list):  # packages = ["group:artifact:version", ...] in lakeivm.toml
        values["packages"] = ",".join(map(str, values["packages"]))
    unknown = set(values) - set(Settings.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {sorted(unknown)}; known: {sorted(Settings.__dataclass_fields__)}")
    return Settings(**values)  # type: ignore[arg-type]


def _seconds(value: object, path: Path) -> float:
    """``lease_seconds`` as a positive, finite number of seconds (from the environment it is a string)."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"lease_seconds (LAKEIVM_LEASE_SECONDS or {path}) must be a positive number of seconds, got {value!r}")
    return seconds
