"""The engine: plans run against devices. ``engine`` (reroutes, recovery, settle), ``executor``
(a plan run step by step, journaled), ``guard`` (a batch checked and undone), ``drain``,
``resources`` (what a reroute locks), ``resync``."""
