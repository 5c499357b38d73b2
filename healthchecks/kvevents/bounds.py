"""What a KV-event publisher can make the launcher hold or spend, declared once for the watcher and the
relay. A publisher flooding the stream (a runaway engine, or any process on its endpoint) meets:

- memory: each subscriber socket queues at most RECEIVE_QUEUE messages of at most MAX_MESSAGE_BYTES.
  When the queue is full ZMQ stops reading the connection, so the publisher's own queue fills (vLLM's
  `hwm`, 100,000) and then drops what it cannot send us. The dropped batches never arrive, so the
  sequence tracking counts them (gaps: missed, then recovered or lost). A larger message closes the
  connection; ZMQ reconnects, and that batch is a gap too.
- time: the stream gets the event loop SLICE seconds at a time, then everything else runs (probes
  first), so a flood delays a probe by a few slices, not by the backlog.
- replay: missing batches are asked of the replay endpoint one request per rank at a time, for at most
  REPLAY_WINDOW of them (vLLM keeps the last `buffer_steps`, 10,000: vllm/config/kv_events.py, 0.32);
  older ones are counted lost at once, so a sequence number jumping by 2**63 costs nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import zmq

RECEIVE_QUEUE = 100  # messages; a publisher outpacing it is read again at once, not after COALESCE
MAX_MESSAGE_BYTES = 4 * 2**20  # ~3x the largest real batch (a 128k-token prefill step, two KV groups)
# At most RECEIVE_QUEUE * MAX_MESSAGE_BYTES (400 MiB) queued per socket, whatever is sent; a flood of
# real-sized batches (tens of KB) queues a few MB.
SLICE = 0.002  # seconds of decoding per event-loop turn under a flood
REPLAY_WINDOW = 10_000  # the most missing batches a replay asks for (vLLM's buffer_steps)

Socket = TypeVar("Socket", bound="zmq.Socket[Any]")


def bounded(sock: Socket) -> Socket:
    """A socket that receives KV events, holding at most RECEIVE_QUEUE messages of MAX_MESSAGE_BYTES."""
    import zmq

    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    return sock


async def take_turns(until: float) -> float:
    """For an async loop over a stream, once per message: past `until`, let the event loop run
    everything else (an awaited ZMQ receive that finds a message queued does not yield), then give the
    stream the next SLICE. Start with `until = time.monotonic() + SLICE`."""
    if time.monotonic() < until:
        return until
    await asyncio.sleep(0)
    return time.monotonic() + SLICE
