"""Schedules: a message published to a topic at every due time of a cron expression or a fixed period.

``timing.py`` says when runs are due, ``service.py`` makes, reads, pauses and deletes schedules, and
``runner.py`` is the loop in every API process that publishes each due run exactly once across nodes.
"""
