#!/bin/sh
# /opt/lakeivm/bin/python: the one Python path of both images (PYSPARK_PYTHON, spark.pyspark.python).
#
# A Spark driver tells the executors which Python runs their Python workers by path, so the path
# must exist in both images and run Python 3.11 with lakeivm and its pinned pandas/pyarrow. The
# interpreters differ in place: the Airflow image installs into a venv (/home/airflow/.local, its
# `python` on PATH; its /usr/local/bin/python is the bare interpreter without them), the Spark image
# into /usr/local/bin/python. This writes, in each image, a two-line script at the one path that
# runs the `python` the package was installed with (a symlink would not do: a venv's Python is
# only the venv's when started from the venv's own bin folder), then checks it.
set -eu
target="$(python -c 'import sys; print(sys.executable)')"
mkdir -p /opt/lakeivm/bin
printf '#!/bin/sh\nexec %s "$@"\n' "$target" > /opt/lakeivm/bin/python
chmod 0755 /opt/lakeivm/bin/python
/opt/lakeivm/bin/python -c 'import sys, lakeivm, pandas, pyarrow; assert sys.version_info[:2] == (3, 11), sys.version'
echo "python-path: /opt/lakeivm/bin/python runs $target"
