"""spark-submit entry points, shipped as files so a cluster can run them from an installed lakeivm."""
