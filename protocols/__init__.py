"""Wire codecs that a driver and an emulator both need, one package per protocol.

Neutral ground below ``drivers/`` and ``emulators/``: a module here imports nothing of ours
outside ``protocols/`` (``tests/test_layers.py``), so a driver and the EMULATOR it is
tested against share only the protocol's own vocabulary, never each other's code.
"""
