"""The reroute HTTP service (``reroute serve``): FastAPI on uvicorn over one ``Engine``.

Modules: ``config`` (the YAML file), ``auth`` (bearer tokens, roles ``read`` and
``operator``), ``schemas`` (request/response bodies), ``views`` (engine values -> bodies),
``core`` (admission, idempotency, drain), ``scheduler`` (the queue), ``events`` (server-sent
events), ``metrics`` (Prometheus), ``routes``, ``ui`` (the operator's web page, ``static/``),
``app``, ``server`` (uvicorn, graceful drain), ``cli``, ``client`` (its Python client).

Concurrency, chosen: a reroute holds exactly the devices and optical ports its plan
touches (``resources.py``); the scheduler runs reroutes whose sets are disjoint at once
and overlapping ones in submission order, never interleaved: the later one is queued
(``pending``, cancellable with DELETE) and planned when its turn comes, on the tables the
earlier one left. Refusing it with 409 instead would push the waiting into every caller
(and a failover monitor's retry loop). The queue is the journal's ``pending`` rows, so it
survives a restart.
"""
