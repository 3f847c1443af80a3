"""reroute: make-before-break reroute service for optical-hybrid fabrics and long-haul links."""

__version__ = "0.1.0"
