"""Tools of the demo app, found by tool_calling's autodiscovery like an admin.py."""

from __future__ import annotations

import datetime
import zlib
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tool_calling import ToolParam, tool
from tool_calling.exceptions import ToolFailure


@tool
def get_current_time(
    timezone: Annotated[str, ToolParam("IANA time zone, e.g. 'Europe/Oslo'")] = "UTC",
) -> str:
    """Return the current date and time in a time zone, as ISO 8601."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        # A ToolFailure's text is written for the model: it reaches it as is (other errors
        # reach it as a generic text with an error id).
        raise ToolFailure(
            f"Unknown time zone {timezone!r}; use an IANA name like 'Europe/Oslo'."
        ) from exc
    return datetime.datetime.now(zone).isoformat(timespec="seconds")


@tool
def get_weather(
    city: Annotated[str, ToolParam("City name, e.g. 'Oslo'")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict[str, object]:
    """Return today's weather for a city (demo data: deterministic per city, not live)."""
    seed = zlib.crc32(city.strip().lower().encode())
    celsius = seed % 35 - 5
    conditions = ["sunny", "cloudy", "rainy", "windy", "snowy"][seed % 5]
    temperature = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "unit": unit, "conditions": conditions}


@tool
def add_numbers(
    a: Annotated[float, ToolParam("First number")],
    b: Annotated[float, ToolParam("Second number")],
) -> float:
    """Add two numbers and return the sum."""
    return a + b


@tool(requires_confirmation=True)
def cancel_booking(
    booking_id: Annotated[str, ToolParam("The booking's id, e.g. 'B7'")],
) -> str:
    """Cancel a booking (demo: nothing is cancelled). The user confirms every cancellation."""
    return f"Cancelled booking {booking_id} (demo: nothing changed)."


@tool(requires_approval=True)
def refund_order(
    order_id: Annotated[str, ToolParam("The order's id, e.g. '42'")],
    amount: Annotated[float, ToolParam("Amount to refund, in euros")],
) -> str:
    """Refund part of an order (demo: nothing is paid back). A person approves every refund."""
    return f"Refunded {amount:.2f} EUR on order {order_id} (demo: no money moved)."
