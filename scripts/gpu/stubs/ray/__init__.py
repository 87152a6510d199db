"""A stand-in for Ray on machines without it (the GPU box has no network and no ray wheel fits).

verl 0.9.1 imports ``ray`` at module level (``verl.protocol``, ``verl.single_controller.base.worker``)
but the in-process engine agentr1 uses never calls it: only ``ray.ObjectRef`` appears in
annotations evaluated at import. Anything else raises, so a real use cannot pass silently."""

__version__ = "0.0.0+agentr1-stub"


class ObjectRef:  # annotations and isinstance checks only
    pass


def _unavailable(*_args, **_kwargs):
    raise RuntimeError("ray is not installed here: this is agentr1's import stub (scripts/gpu/stubs)")


get = put = init = remote = wait = get_runtime_context = _unavailable


def is_initialized() -> bool:
    return False


class _Util:
    get_node_ip_address = staticmethod(_unavailable)


util = _Util()
