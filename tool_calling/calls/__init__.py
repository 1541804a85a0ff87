"""Tool calls of governed turns, from request to end: the only writer of ``ToolExecution``.

``lifecycle`` holds the states and every transition; ``gate`` every rule a call must pass before
its tool runs, in one order, whatever the path; ``running`` runs one attempt through the gate and
says how it ended; ``inline`` is a call in the turn's own process (with its retries), ``worker``
what a Celery worker does with one; ``dispatch`` sends calls to workers, ``executors`` waits for
them, ``approvals`` holds the decisions of people, and ``sweeper`` the recovery of calls that
were lost.
"""
