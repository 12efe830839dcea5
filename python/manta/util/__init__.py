"""manta.util: ActorPool, queue.Queue, multiprocessing.Pool (Ray's ray.util)."""
from manta.util.actor_pool import ActorPool

__all__ = ["ActorPool"]
