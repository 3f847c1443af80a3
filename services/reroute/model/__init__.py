"""The model: what a reroute is (``intent``), the fabric it runs on (``topology``, read
from a topology file: ``topofile``, ``generate``), the devices that make it (``inventory``),
and how their files are read and their faults told (``yamlfile``, ``problems``,
``modeldoc``). Imports nothing of the engine, the store or the service."""
