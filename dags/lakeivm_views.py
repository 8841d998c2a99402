"""One maintenance DAG per view spec in the views folder (LAKEIVM_VIEWS, default the shipped lakeivm/schemas/views).

Trigger an on-demand refresh with ``airflow dags trigger lakeivm__<view> -c '{"refresh": true}'``.
"""
from lakeivm.scheduling import build_dags

globals().update(build_dags())
