"""Device EMULATORS, peers of ``drivers/``: each speaks its device's protocol and imports
neither ``services/`` nor the driver of the device it plays (``tests/test_layers.py``)."""
