"""The queue replica model (docs/model.md): each replica one request in service and a
FIFO queue, in fixed time steps or exact event time.

``workload`` (§2, common random numbers), ``dtypes`` (records and codes), ``policies``
(§5, one compiled function each), ``engine`` (the step and batch kernels), ``metrics``
(§6).
"""
