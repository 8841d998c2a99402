"""One maintenance DAG per view spec in the views folder (LAKEIVM_VIEWS, default the shipped lakeivm/schemas/views).

Point AIRFLOW__CORE__DAGS_FOLDER at this file's folder: ``dags/`` in a source checkout, or
``importlib.resources.files("lakeivm.dags")`` in an installed lakeivm (``lakeivm.demo`` does).
Trigger an on-demand refresh with ``airflow dags trigger lakeivm__<view> -c '{"refresh": true}'``.
"""
from lakeivm.infra.scheduling import build_dags

globals().update(build_dags())
