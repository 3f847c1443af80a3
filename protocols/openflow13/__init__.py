"""OpenFlow 1.3 as both sides name it: ``errors`` (error types and codes, OVS's bundle errors)."""
