"""The benchmark harness (``make bench`` / ``python -m bench``); see docs/performance.md.

The older single-purpose scripts (``topic_publish.py``, ``context_prefix.py``,
``attachments_image.py``) still run on their own; ``attachments_image`` is also the ``image``
case of the harness.
"""
