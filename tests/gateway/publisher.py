"""Child process for the concurrency tests: publish Updates for one user, rolling some back.

Usage: python -m tests.gateway.publisher USER_ID COUNT ROLLBACK_EVERY TAG
"""

from __future__ import annotations

import sys

import django


class Rollback(Exception):
    pass


def main() -> None:
    django.setup()
    from django.db import transaction

    from apps.gateway.events import item, publish_update

    user_id, count, every, tag = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for i in range(count):
        try:
            with transaction.atomic():
                publish_update(
                    user_id=user_id,
                    items=[item("message", "created", f"{tag}-{i}")],
                    data_list=[{"tag": tag, "i": i}],
                )
                if every and i % every == every - 1:
                    raise Rollback
        except Rollback:
            pass


if __name__ == "__main__":
    main()
