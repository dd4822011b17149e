"""
The private parts of torch and ExecuTorch the tools reach into, in one place. Each is imported when a command first
needs it, not when a module is imported: a release that moves one breaks the command that uses it (the compiled
decoder, the kernel profile, the ExecuTorch runner's threads), not every tool importing tools/fast_sample.py
(tools.bench, tools.compare, tools.gpu_check). Written for torch WRITTEN_FOR and ExecuTorch
EXECUTORCH_WRITTEN_FOR; tests/test_compile.py compiles a one-layer model through the torch ones with inductor in the
default suite, so a release that moves one fails there first; tests/test_executorch.py runs the ExecuTorch ones
where ExecuTorch is installed.

torch._dynamo's mark_dynamic, mark_static_address and reset, used in place, are torch.compile's documented
controls (torch.compiler's pages), not internals.
"""

WRITTEN_FOR = "2.13.0"
EXECUTORCH_WRITTEN_FOR = "1.5.1"


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


def executorch_set_threads(num_threads):
    """The size of ExecuTorch's thread pool, which its XNNPACK and optimized kernels share: the pybindings'
    _unsafe_reset_threadpool (executorch.extension.pybindings.portable_lib, ExecuTorch 1.5.1); its public runtime
    has no such setting."""
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    _unsafe_reset_threadpool(num_threads)


def executorch_load(pte, **options):
    """The program at `pte`, loaded by the pybindings' _load_for_executorch (ExecuTorch 1.5.1), whose options
    (enable_etdump, debug_buffer_size) switch on the event tracer of the kernel profile
    (tools/executorch/profile.py)."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch
    return _load_for_executorch(pte, **options)


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.torch_internals is a library, not a command (fix: the commands are in docs/reference.md)")
