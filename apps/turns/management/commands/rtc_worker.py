"""``python manage.py rtc_worker``: run turns from the session queue until SIGTERM/SIGINT."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run agent turns from the session queue (Procfile: worker)."

    def handle(self, *args: Any, **options: Any) -> None:
        from apps.turns.worker import Worker

        worker = Worker()

        def stop(*_: object) -> None:
            worker.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker.run()
