"""The queue replica model (docs/model.md): each replica one request in service and a
FIFO queue, in fixed time steps or exact event time.

``params`` (its sweep keys, ``MODEL``, its checks), ``workload`` (§2, common random
numbers), ``dtypes`` (records and codes), ``policies`` (§5, one compiled function
each), ``engine`` (the step and batch kernels), ``metrics`` (§6), ``grid`` (a stage as
flat runs, the chunk runner, the Dataset), ``summary`` (the printed table),
``timeline`` and ``timeline_kernels`` (timelines).
"""
