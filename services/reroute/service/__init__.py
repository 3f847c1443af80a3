"""The reroute HTTP service (``reroute serve``): FastAPI on uvicorn over one ``Engine``.

Modules: ``config`` (the YAML file), ``auth`` (bearer tokens, roles ``read`` and
``operator``), ``schemas`` (request/response bodies), ``views`` (engine values -> bodies),
``core`` (admission, idempotency, drain), ``worker`` (the queue), ``events`` (server-sent
events), ``metrics`` (Prometheus), ``routes``, ``ui`` (the operator's web page, ``static/``),
``app``, ``server`` (uvicorn, graceful drain), ``cli``, ``client`` (its Python client).

Concurrency, chosen: reroutes are executed by ONE worker in FIFO order. Two reroutes
touching the same flows or links are therefore never interleaved: the second is queued
(``pending``, cancellable with DELETE) and planned when its turn comes, on the tables the
first left. Refusing it with 409 instead would push the waiting into every caller (and a
failover monitor's retry loop); locking per flow or link would let unrelated reroutes run
in parallel but needs the plan, which depends on the tables the running one is changing.
The queue is the journal's ``pending`` rows, so it survives a restart.
"""
