"""A lake on S3: Spark writes and reads it through ``s3a://`` (hadoop-aws, fetched once by the
``packages`` setting beside Delta's JARs), lakeivm's own reads and claims go through delta-rs and
pyarrow, all against moto's S3 server on loopback. Built, refreshed incrementally after changes,
audited, as a user would: the CLI and a Python session in fresh processes.

Under ``-m slow``: the first run fetches hadoop-aws's AWS SDK bundle (674 MB) into the JAR cache, and
the run takes ~2.5 minutes (moto answers one request at a time)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import moto_s3

pytestmark = [pytest.mark.slow]

SCRIPT = """
from dataclasses import replace

from lakeivm.config import load_settings
from lakeivm.datagen.tpch import TpchChangeStream
from lakeivm.run.audit import audit
from lakeivm.run.engine import run_view
from lakeivm.store.lake import open_lake
from lakeivm.catalog.registry import find_spec, load_specs
from lakeivm.spark import get_spark

settings = load_settings()
lake = open_lake(get_spark(settings), settings)
shipped = find_spec(load_specs(settings.views, settings.lake), "revenue_by_nation")
for policy in ("incremental", "full"):
    print(policy, run_view(lake, replace(shipped, name=f"revenue_{policy}", refresh_policy=policy)).mode, flush=True)
stream = TpchChangeStream(lake, seed=3)
for batch in range(2):
    stream.rf1(5), stream.rf2(5)
    for policy in ("incremental", "full"):
        spec = replace(shipped, name=f"revenue_{policy}", refresh_policy=policy)
        row = run_view(lake, spec, mode="refresh")
        print(policy, batch, row.kind, sorted(row.applied), "audit", audit(lake, spec).ok, flush=True)
"""


def test_a_lake_on_s3_is_built_refreshed_and_audited(tmp_path):
    with moto_s3("lakeivm") as aws:
        (tmp_path / "lakeivm.toml").write_text(
            'lake = "s3a://lakeivm/lake"\nspark_master = "local[2]"\npackages = ["org.apache.hadoop:hadoop-aws:3.5.0"]\n'
            "[spark_conf]\n"
            f'"spark.hadoop.fs.s3a.endpoint" = "{aws["AWS_ENDPOINT_URL"]}"\n'
            '"spark.hadoop.fs.s3a.endpoint.region" = "us-east-1"\n'
            '"spark.hadoop.fs.s3a.path.style.access" = "true"\n'
            '"spark.hadoop.fs.s3a.connection.ssl.enabled" = "false"\n'
            '"spark.hadoop.fs.s3a.access.key" = "lakeivm"\n'
            '"spark.hadoop.fs.s3a.secret.key" = "lakeivm"\n')
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEIVM_")}, **aws}

        def run(*command: str) -> str:
            done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, done.stdout + done.stderr[-3000:]
            return done.stdout

        built = run(sys.executable, "-m", "lakeivm.cli", "datagen", "tpch", "--scale", "0.001",
                    "--tpch-tables", "customer,orders,lineitem,nation")
        assert "tables/lineitem: 6005 rows" in built
        lines = run(sys.executable, "-c", SCRIPT).splitlines()
        assert lines[:2] == ["incremental bootstrap", "full bootstrap"], lines
        for batch in range(2):  # F-IVM's changes and a recompute, each equal to its SQL on S3
            assert f"incremental {batch} fivm ['lineitem', 'orders'] audit True" in lines, lines
            assert f"full {batch} full ['lineitem', 'orders'] audit True" in lines, lines
        refreshed = run(sys.executable, "-m", "lakeivm.cli", "refresh", "revenue_by_nation")  # the CLI's claim on S3 too
        assert "run #1 bootstrap" in refreshed, refreshed
        audited = run(sys.executable, "-m", "lakeivm.cli", "audit", "revenue_by_nation")
        assert "no difference" in audited, audited
