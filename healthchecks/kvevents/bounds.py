"""What a KV-event publisher can make the launcher hold or spend, declared once for the watcher and the
relay. A publisher flooding the stream (a runaway engine, or any process on its endpoint) meets:

- memory: each subscriber socket queues at most RECEIVE_QUEUE messages. When the queue is full ZMQ
  stops reading the connection, so the publisher's own queue fills (vLLM's `hwm`, 100,000) and then
  drops what it cannot send us. The dropped batches never arrive, so the sequence tracking counts
  them (gaps: missed, then recovered or lost). A message's size is not bounded here: ZMQ takes a
  message over ZMQ_MAXMSGSIZE as a protocol error and never reconnects, so one oversized batch from
  a real engine would end the subscription for good.
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

RECEIVE_QUEUE = 100  # messages (a flood of real-sized batches, tens of KB: a few MB queued); a
# publisher outpacing it is read again at once, not after COALESCE
SLICE = 0.002  # seconds of decoding per event-loop turn under a flood
REPLAY_WINDOW = 10_000  # the most missing batches a replay asks for (vLLM's buffer_steps)

Socket = TypeVar("Socket", bound="zmq.Socket[Any]")


def bounded(sock: Socket) -> Socket:
    """A socket that receives KV events, holding at most RECEIVE_QUEUE messages."""
    import zmq

    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    return sock


async def take_turns(until: float) -> float:
    """For an async loop over a stream, once per message: past `until`, let the event loop run
    everything else (an awaited ZMQ receive that finds a message queued does not yield), then give the
    stream the next SLICE. Start with `until = time.monotonic() + SLICE`."""
    if time.monotonic() < until:
        return until
    await asyncio.sleep(0)
    return time.monotonic() + SLICE
