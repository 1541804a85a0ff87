"""Tool calls of governed turns, from request to end: the only writer of ``ToolExecution``.

``lifecycle`` holds the states and every transition; ``running`` re-checks governance, runs a
tool and says how it ended; ``dispatch`` sends calls to Celery workers, ``executors`` waits for
them, ``worker`` is what a worker does with one, ``approvals`` the decisions of people, and
``sweeper`` the recovery of calls that were lost.
"""
