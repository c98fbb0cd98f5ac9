"""The batching replica model (token-model.md): continuous batching over a paged KV
cache with prefix caching, routed by work in flight.

``workload`` (§1), ``dtypes`` (records and codes), ``blocks`` (the KV pool: resident
ids, refcounts, LRU eviction), ``policies`` (§5), ``engine`` (§2–§4, the batch
kernel), ``metrics`` (§7).
"""
