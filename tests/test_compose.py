"""docker-compose.yml wiring, checked by parsing (no Docker engine runs here)."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
SPARK = ["spark-master", "spark-worker"]


def test_services_exist():
    assert set(AIRFLOW + SPARK + ["postgres"]) <= set(SERVICES)
    assert [SERVICES[s]["command"] for s in AIRFLOW[1:]] == ["api-server", "scheduler", "dag-processor", "triggerer"]


def test_airflow_services_share_settings():
    env = SERVICES["airflow-scheduler"]["environment"]
    for service in AIRFLOW:
        assert SERVICES[service]["environment"] == env
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
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


def test_images_install_the_package_and_delta():
    for name in ("Dockerfile.airflow", "Dockerfile.spark"):
        text = (REPO_ROOT / "docker" / name).read_text()
        assert "pip install" in text and "/opt/lakeivm/src" in text and "--fetch-jars" in text
    assert "apache/airflow:3.3.2-python3.11" in (REPO_ROOT / "docker" / "Dockerfile.airflow").read_text()
    assert "apache/spark:4.2.0" in (REPO_ROOT / "docker" / "Dockerfile.spark").read_text()
