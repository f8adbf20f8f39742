"""`runner serve`: any spec's policy served over WebSocket in openpi's wire format, with dynamic batching
(runner.serve.server; the batching is runner.serve.batcher, the counters runner.serve.stats)."""
