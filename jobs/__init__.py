"""spark-submit entry points, run as files: the repository's jobs/, installed as the package lakeivm.jobs."""
