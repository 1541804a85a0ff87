"""``tool_calling.calls.transport``: kombu's Redis transport with one client per channel.

Against the tier's real redis-server. The workers of this tier use the transport too
(tests/settings_celery.py, as project/settings.py does), so every test of the tier that sends
or runs a task goes through it; here is what it changes, and that a reconnection still works.
"""

from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings
from kombu import Connection, Exchange, Queue

from tool_calling.calls.transport import RedisChannel, RedisTransport

pytestmark = [pytest.mark.integration]


@pytest.fixture
def connection(redis_server: object) -> Connection:
    with Connection(settings.CELERY_BROKER_URL, transport=settings.CELERY_BROKER_TRANSPORT) as conn:
        yield conn


def test_the_project_settings_name_this_transport(connection: Connection) -> None:
    assert isinstance(connection.transport, RedisTransport)
    assert isinstance(connection.default_channel, RedisChannel)


def test_a_channel_builds_one_client_for_its_commands_and_a_new_one_for_a_new_pool(
    connection: Connection,
) -> None:
    channel = connection.default_channel
    first = channel._create_client()
    assert channel._create_client() is first  # (kombu's channel built a new one each time)
    assert isinstance(first, redis.Redis)
    assert channel._create_client(asynchronous=True) is not first  # the consumer's own
    channel._pool = None  # what kombu does when the channel closes and reconnects
    assert channel._create_client() is not first


def test_messages_go_and_come_back_acknowledged_through_the_shared_client(
    connection: Connection,
) -> None:
    """Publish, deliver (the unacknowledged index), acknowledge (the index cleared): the
    commands that used a new client each now share one, and Redis holds nothing left over.

    The broker is the tier's: other tests' workers (killed ones among them) may hold messages
    of their own in the unacknowledged index, so only this queue's count."""
    name = f"transport-test-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    with connection.Producer() as producer:
        for n in range(20):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue])
    seen: list[int] = []

    def received(body: dict[str, int], message: object) -> None:
        seen.append(body["n"])
        message.ack()  # type: ignore[attr-defined]

    with connection.Consumer(queue, callbacks=[received], accept=["json"]):
        while len(seen) < 20:
            connection.drain_events(timeout=5)
    assert sorted(seen) == list(range(20))
    client = connection.default_channel._create_client()
    ours = [raw for raw in client.hvals("unacked") if name.encode() in raw]
    assert ours == []
    assert client.llen(name) == 0
    queue(connection.default_channel).delete()
