"""
The private parts of torch the tools reach into, in one place. Each is imported when a command first needs it,
not when a module is imported: a torch release that moves one breaks the command that uses it (the compiled
decoder, the kernel profile), not every tool importing tools/fast_sample.py (tools.bench, tools.compare,
tools.gpu_check). Written for torch WRITTEN_FOR; tests/test_compile.py compiles a one-layer model through them
with inductor in the default suite, so a release that moves one fails there first.

torch._dynamo's mark_dynamic, mark_static_address and reset, used in place, are torch.compile's documented
controls (torch.compiler's pages), not internals.
"""

WRITTEN_FOR = "2.13.0"


def inductor_config():
    """torch._inductor.config (torch 2.13.0): inductor's global settings. Change them only with its
    .patch(...) as a context manager, which restores them (tools/fast_sample.py's CPU modes, the kernel profile
    of tools/executorch/profile.py)."""
    import torch._inductor.config
    return torch._inductor.config


def inductor_loaded_modules():
    """The list of the Python modules inductor has loaded, one per compiled graph, newest last
    (torch._inductor.codecache.PyCodeCache.modules, torch 2.13.0): their attributes hold a frozen graph's
    weights (tools/fast_sample.py's to_huge_pages)."""
    from torch._inductor.codecache import PyCodeCache
    return PyCodeCache.modules
