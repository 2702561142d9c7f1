"""The built-in ops, one module per family.

Each module declares its ops as a list ``OPS`` of
:class:`~hetflow.executors.opdecl.Op`, every op beside its shape rule, its
body and, where Vulkan computes it, its WGSL :class:`~hetflow.executors.opdecl.Kernel`.
:data:`ENTRIES` is all of them in the order the registry, ``hetflow ops``
and the ops reference list them: family by family, as here.

=================  ===========================================================
module             ops
=================  ===========================================================
``sources``        ``random.normal``, ``random.uniform``, ``zeros``, ``ones``, ``arange``, ``full``
``elementwise``    arithmetic and comparisons, ``where``, ``clip``, activations, math, ``cast``
``linalg``         ``matmul``, ``attention``, ``rope``
``norms``          ``softmax``, ``rmsnorm``, ``layernorm``
``reductions``     ``sum``, ``mean``, ``max``, ``min``, ``argmax``, ``argmin``
``layout``         ``transpose``, ``reshape``, ``concat``, ``split``, ``slice``
``indexing``       ``gather``
``loading``        ``load`` (files), ``input`` (arrays from Python)
``quant``          ``quantize.scale``, ``quantize``, ``dequantize``
=================  ===========================================================
"""

from __future__ import annotations

from hetflow.executors.builtin import (elementwise, indexing, layout, linalg, loading, norms, quant, reductions,
                                      sources)

__all__ = ["ENTRIES"]

ENTRIES = [*sources.OPS, *elementwise.OPS, *linalg.OPS, *norms.OPS, *reductions.OPS, *layout.OPS, *indexing.OPS,
           *loading.OPS, *quant.OPS]
