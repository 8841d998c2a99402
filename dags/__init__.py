"""lakeivm's DAG files: the repository's dags/, installed as the package lakeivm.dags.

An installed lakeivm finds this folder with ``importlib.resources.files("lakeivm.dags")``.
"""
