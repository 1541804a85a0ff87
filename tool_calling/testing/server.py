"""``python -m tool_calling.testing.server``: run the ReplayServer from a shell.

The server itself lives in ``tool_calling.testing._replay`` (``tool_calling.testing`` exports
``ReplayServer``); this module is the command, so running it never finds itself imported.
"""

from __future__ import annotations

import sys

from tool_calling.testing._replay import CREATED, ReplayServer, main

__all__ = ["CREATED", "ReplayServer", "main"]

if __name__ == "__main__":
    sys.exit(main())
