"""Prometheus metrics of a worker, served on its /metrics page.

Names follow Prometheus conventions; `stage` is the cascade stage that decided
(or `none` for a unique document), `agent` the stage agent that did the work.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

VERDICTS = Counter("dedup_verdicts", "Verdicts given, by deciding stage and verdict.", ["stage", "verdict"])
REPEATED = Counter("dedup_redelivered", "Records that already had a verdict (redeliveries).", ["agent"])
REJECTED = Counter("dedup_rejected", "Records sent to the rejected topic.", ["agent"])
FORWARDED = Counter("dedup_forwarded", "Documents passed on to the next stage topic.", ["agent"])
SIMHASH_DISTANCE = Histogram(
    "dedup_simhash_distance", "Hamming distance of SimHash links.", buckets=(0, 1, 2, 3, 4, 5, 6, 7, 8)
)
COSINE = Histogram(
    "dedup_semantic_score",
    "Cosine of semantic links and reviews.",
    buckets=(0.8, 0.83, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.98, 0.99, 1.0),
)
LATENCY = Histogram(
    "dedup_verdict_latency_seconds",
    "From the raw record's broker timestamp to its verdict.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CANDIDATES = Histogram(
    "dedup_simhash_candidates", "Canonicals returned per SimHash band query.", buckets=(0, 1, 2, 4, 8, 16, 64, 256)
)
BATCH_SIZE = Histogram(
    "dedup_batch_size", "Records per decision batch.", ["agent"], buckets=(1, 4, 16, 64, 128, 256, 512, 1024)
)
BATCH_SECONDS = Histogram("dedup_batch_seconds", "Time to decide one batch, outputs excluded.", ["agent"])
EMBED_BATCH = Histogram("dedup_embed_batch_size", "Texts per embedding call.", buckets=(1, 2, 4, 8, 16, 32, 64, 128))
GROUP_SIZE = Histogram(
    "dedup_group_size",
    "Size of a group after a duplicate joined it: a jump is the percolation alarm.",
    buckets=(2, 3, 5, 10, 20, 50, 100, 500, 1000, 10000),
)
FAILURES = Counter("dedup_batch_failures", "Batches that failed on a store or model and were retried.", ["agent"])
EMBED_RETRIES = Counter(
    "dedup_embed_retries",
    "Batches decided again after embedding a document found to need a vector (no model runs under the lease).",
)
UNSENDABLE = Counter(
    "dedup_unsendable", "Records the broker refused for good (too large), sent as rejections instead.", ["topic"]
)
