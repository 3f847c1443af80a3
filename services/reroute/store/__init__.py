"""Where reroutes are kept: ``records`` (what is stored), the ``Journaling`` and ``Locks``
protocols (``journaling``, ``locks``), and the stores side by side: ``sqlite`` and ``flock``
(the embedded default), ``etcd`` (replicas); ``config`` chooses one (``open_store``)."""
