"""The array API's inspection namespace (__array_namespace_info__): the
one device ferry.numpy arrays live on ('ferry': Ferry places the work) and
the element types it stores."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _dtypes as dt

_ALL = {t.name: t for t in dt.SUPPORTED}


class Info:
    def capabilities(self) -> dict[str, Any]:
        # Boolean masks give data-dependent shapes (they wait for a count);
        # there is no linalg stack support, hence no batched "max dimensions" claim.
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> str:
        return "ferry"

    def devices(self) -> list[str]:
        return ["ferry"]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        return {"real floating": dt.float64, "complex floating": dt.complex128, "integral": dt.int64,
                "indexing": dt.int64}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        if kind is None:
            return dict(_ALL)
        return {name: t for name, t in _ALL.items() if dt.isdtype(t, kind)}


def __array_namespace_info__() -> Info:  # noqa: N807 - the array API's name
    return Info()
