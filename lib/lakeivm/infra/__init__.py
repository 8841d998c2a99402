"""Where lakeivm runs: Airflow DAGs, tasks and REST client, the Spark Connect server, the deployment (floor 5)."""
