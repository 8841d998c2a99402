"""Airflow import errors for the view specs that do not load: one line per file, with its line.

The views' DAGs are built in lakeivm_views.py, which skips such specs; the error is raised from
this file of its own because Airflow 3 marks every DAG of a file with an import error stale.
With every spec loading, this file defines no DAG and raises nothing.
"""
from lakeivm.infra.scheduling import check_specs

check_specs()
