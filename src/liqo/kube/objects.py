"""``Obj``: a Kubernetes object as the API server sends it, decoded JSON, in one name for every layer.

Objects stay plain dicts on purpose: controllers read a few fields and write patches, and a typed model
per kind would be a second schema beside the CRDs' (``liqo.api.crds``) to keep in step. The pure functions
that read an object name what they read (``liqo.api``); this alias only says "an object", once.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
