"""Where Ray keeps RemoteFunction (``ray.remote_function``)."""
from manta._remote import RemoteFunction

__all__ = ["RemoteFunction"]
