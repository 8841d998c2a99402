"""An Airflow notifier for tests/test_dags.py: writes its text to a file (a deadline alert's target)."""
from __future__ import annotations

from pathlib import Path

from airflow.sdk.bases.notifier import BaseNotifier


class FileNotifier(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, path: str, text: str) -> None:
        super().__init__()
        self.path, self.text = path, text

    async def async_notify(self, context) -> None:
        Path(self.path).write_text(self.text)
