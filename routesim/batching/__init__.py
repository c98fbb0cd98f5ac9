"""The batching replica model (token-model.md): continuous batching over a paged KV
cache with prefix caching, routed by work in flight.

``params`` (its sweep keys, ``MODEL``, its checks), ``workload`` (§1), ``dtypes``
(records and codes), ``blocks`` (the KV pool: resident ids, refcounts, LRU eviction),
``replica`` (one replica's iterations), ``lists`` and ``schedule`` (its sequences
waiting and running, and when decoding ones are due), ``policies`` (§5), ``router`` (routers and
what failures do to them), ``timers``, ``engine`` (§2–§4, the batch kernel),
``metrics`` (§7), ``runs`` (flat parameters → kernel arrays), ``grid`` (a stage as
flat runs, the chunk runner, the Dataset), ``summary`` (the printed table),
``timeline`` (timelines).
"""
