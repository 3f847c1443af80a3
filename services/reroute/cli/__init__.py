"""The ``reroute`` command line: ``main`` (the entry point) and the service's command groups.

``main.py`` builds the parser from the ``reroute.commands`` entry points; ``apply.py``
(plan, apply, recover), ``topo.py`` and ``inventory.py`` are the groups services/ adds.
"""
