"""The seeds' experiments, run on the emulated fabric (or real equipment through an
inventory): ``demo`` (seed 003, BBM vs MBB once), ``twosite`` (seeds 000/001 failover).

Experiments may import ``services`` and ``drivers`` and ``fabric``; nothing imports them.
"""
