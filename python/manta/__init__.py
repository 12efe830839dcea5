"""manta for Python: Ray's programming model on manta's runtime.

    import manta as ray

    @ray.remote
    def square(x):
        return x * x

    ray.init()
    print(ray.get([square.remote(i) for i in range(4)]))

Tasks run in worker processes forked from this interpreter; actors each in a
process of their own; large values (numpy arrays) are written once into a
shared arena and read in place.
"""
from manta import exceptions
from manta._api import (available_resources, cancel, cluster_resources, get, get_gpu_ids, get_runtime_context,
                        init, is_initialized, nodes, put, shutdown, wait)
from manta._manta import ObjectRef
from manta._remote import ActorClass, ActorHandle, RemoteFunction, get_actor, kill, method, remote

__version__ = "0.1.0"

__all__ = [
    "ActorClass", "ActorHandle", "ObjectRef", "RemoteFunction", "available_resources", "cancel",
    "cluster_resources", "exceptions", "get", "get_actor", "get_gpu_ids", "get_runtime_context", "init",
    "is_initialized", "kill", "method", "nodes", "put", "remote", "shutdown", "wait",
]
