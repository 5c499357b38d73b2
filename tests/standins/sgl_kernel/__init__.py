"""STAND-IN for `sgl_kernel` (PyPI sglang-kernel 0.4.10, pinned by SGLang 0.5.23), which has no CPU
build: its extension needs libcuda at import. SGLang's CPU engine calls its kernels only on CPUs with
Intel AMX (sglang/srt/utils/common.py `cpu_has_amx_support`), so on a CPU without AMX every import of
it must succeed and no kernel is ever run.

What it gives, after the real package's module layout (sgl-project/sglang `sgl-kernel/python/sgl_kernel/`:
`__init__.py` re-exports the kernels; submodules such as `allreduce`, `flash_attn`, `kvcacheio`,
`quantization`, `mamba`):
- any attribute of `sgl_kernel` or of any `sgl_kernel.<sub>` module exists: a stub that raises
  NotImplementedError when called (so a kernel that does get called fails loudly, naming itself);
- `sgl_kernel.scalar_type` is the REAL file (pure Python, `scalar_types.uint4b8` etc. for the
  quantization utils): scripts/install-engines.sh copies it from the pinned wheel beside this file; it
  is not committed here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence

STANDIN = True


class _Kernel:
    """A kernel that is not here: it exists, and refuses to run."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise NotImplementedError(f"{self.__name__}: sgl_kernel is a STAND-IN here (no CPU build)")

    def __getattr__(self, name: str) -> _Kernel:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Kernel(f"{self.__name__}.{name}")

    def __repr__(self) -> str:
        return f"<stand-in kernel {self.__name__}>"


def _attribute(module: str) -> Callable[[str], _Kernel]:
    def __getattr__(name: str) -> _Kernel:
        if name.startswith("__"):  # __path__, __file__, ... keep their import-system meaning
            raise AttributeError(name)
        return _Kernel(f"{module}.{name}")

    return __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`sgl_kernel.<anything>`: a package whose attributes are stand-in kernels. Last on sys.meta_path,
    so real files beside this one (scalar_type.py) are found first by the normal path finder."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        if fullname == f"{__name__}.scalar_type":  # must be the real file, never a stub
            raise ImportError(
                f"{fullname} is missing beside the stand-in: run scripts/install-engines.sh sglang-full"
            )
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _attribute(spec.name)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


__getattr__ = _attribute(__name__)
if not any(isinstance(finder, _Submodules) for finder in sys.meta_path):
    sys.meta_path.append(_Submodules())
