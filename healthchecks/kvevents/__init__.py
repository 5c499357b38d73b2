"""The KV-event watcher: subscribes to every local rank's publisher, the way llm-d's router does, and
says whether the stream is whole. Precise prefix-cache routing silently degrades when a publisher
stops or loses messages; this is where that becomes visible (metrics, /kvevents, logs, readiness).

- wire.py      the wire format and its decoding (pure): frames, MessagePack batches, the replay protocol
- sequence.py  what each sequence number means: next, a gap, a restarted publisher, old (pure)
- watcher.py   per-rank counts, gaps asked of the replay endpoint, silence while requests are served
- metrics.py   the watcher's metric families, read from its state at scrape time
- relay.py     IPv6 pods: the engine's ipc:// publishers relayed on dual-stack TCP
"""
