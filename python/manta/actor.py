"""Where Ray keeps its actor classes (``ray.actor``)."""
from manta._remote import ActorClass, ActorHandle, ActorMethod, method

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "method"]
