"""The API's rate limit of new turns, counted atomically in the database (S24).

DRF's ``ScopedRateThrottle`` reads a client's request history from the cache, decides, appends
and writes it back: requests that come together all read the same history and all pass (60 at
once against 30 a minute: 60 passed). :class:`TurnRateThrottle` keeps DRF's scope and rate
(``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["tool_calling_turns"]``: ``"30/min"`` in the
example project), its sliding window and its 429 with ``Retry-After``, and keeps the history in
a ``RequestHistory`` row read with a lock and written back in the same transaction: however many
requests and processes come at once, no more than the rate pass. Nothing is read from the cache
(so nothing there is ever unpickled for it).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle

from tool_calling import models
from tool_calling.conf import DEFAULT_TURN_RATE, TURN_THROTTLE_SCOPE

__all__ = ["RateLimiterUnavailable", "TurnRateThrottle"]

logger = logging.getLogger("tool_calling.api")


class RateLimiterUnavailable(APIException):
    """503: the database that counts turns did not answer; nothing was saved."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "The turn was not started: the rate limiter is unavailable. Nothing was saved; send the "
        "message again later."
    )
    default_code = "rate_limiter_unavailable"


class TurnRateThrottle(ScopedRateThrottle):
    """``ScopedRateThrottle``'s scope, rate and window, counted atomically in the database.

    The rates are read when a request comes, not at import (DRF's class binds
    ``DEFAULT_THROTTLE_RATES`` when it is imported, so a changed setting would not reach it).
    """

    def get_rate(self) -> str | None:
        """The scope's rate in the current ``REST_FRAMEWORK`` settings, else the default.

        ``DEFAULT_TURN_RATE`` when they name none: a project that forgot it gets a limit, not a
        500.
        """
        self.THROTTLE_RATES = {
            TURN_THROTTLE_SCOPE: DEFAULT_TURN_RATE,
            **api_settings.DEFAULT_THROTTLE_RATES,
        }
        rate: str | None = super().get_rate()
        return rate

    def allow_request(self, request: Any, view: Any) -> bool:
        """Count the request in its client's history, unless the rate is used up (atomic).

        Raises:
            RateLimiterUnavailable: the database did not answer (503, not 500).
        """
        # The scope, the rate and the client's key, as ScopedRateThrottle finds them.
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        try:
            return self._count(self.key, self.timer())
        except DatabaseError as exc:
            logger.warning("The turn rate limiter's database failed: %r", exc)
            raise RateLimiterUnavailable() from exc

    def _count(self, key: str, now: float) -> bool:
        for _ in range(3):  # a first request of the client races to create its row
            with transaction.atomic():
                row = models.RequestHistory.objects.select_for_update().filter(key=key).first()
                if row is None:
                    try:
                        with transaction.atomic():
                            models.RequestHistory.objects.create(key=key, times=[now])
                    except IntegrityError:
                        continue  # another request made it meanwhile: count in it
                    self.history, self.now = [now], now
                    return True
                window = [t for t in row.times if t > now - self.duration]
                # Newest first, as DRF's wait() reads it.
                self.history, self.now = sorted(window, reverse=True), now
                if len(window) >= self.num_requests:
                    return False
                row.times = [*window, now]
                row.save(update_fields=["times", "updated_at"])
                self.history.insert(0, now)
                return True
        raise DatabaseError(f"Could not create the request history {key!r}")
