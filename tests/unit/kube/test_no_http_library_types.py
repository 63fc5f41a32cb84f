"""``liqo.kube`` speaks its own words to its callers: no aiohttp client type in a public signature.

Callers of the API client (every capability) would otherwise be bound to the HTTP library: a timeout as an
``aiohttp.ClientTimeout``, a WebSocket as an ``aiohttp.ClientWebSocketResponse``. The servers are another
matter: liqo's listeners are aiohttp applications by choice (``aiohttp.web``), which the metrics listener and
the process shell serve, so ``aiohttp.web`` types may appear.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType
from typing import Any

import liqo.kube

_DOTTED = re.compile(r"[A-Za-z_][\w.]*")
WRAPPERS = {"liqo.kube.websocket.WebSocket.__init__": "made by KubeClient.websocket only, around the socket it opened"}
"""Where a library object is wrapped into liqo's words: the one place it may be handed in."""


def _resolve(module: ModuleType, dotted: str) -> Any:
    head, *rest = dotted.split(".")
    found: Any = vars(module).get(head)
    for part in rest:
        found = getattr(found, part, None)
    return found


def _from_http_client_library(thing: Any) -> bool:
    origin = thing.__name__ if inspect.ismodule(thing) else getattr(thing, "__module__", None)
    return isinstance(origin, str) and origin.startswith("aiohttp") and not origin.startswith("aiohttp.web")


def _public_signatures(module: ModuleType) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, member in vars(module).items():
        if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(member):
            found.append((name, member.__annotations__))
        elif inspect.isclass(member):
            for method_name, method in vars(member).items():
                if inspect.isfunction(method) and (not method_name.startswith("_") or method_name == "__init__"):
                    found.append((f"{name}.{method_name}", method.__annotations__))
    return found


def test_no_public_signature_of_liqo_kube_takes_or_returns_an_aiohttp_client_type() -> None:
    offending = []
    for info in pkgutil.iter_modules(liqo.kube.__path__, prefix="liqo.kube."):
        module = importlib.import_module(info.name)
        for where, hints in _public_signatures(module):
            if f"{info.name}.{where}" in WRAPPERS:
                continue
            for parameter, annotation in hints.items():
                names = _DOTTED.findall(str(annotation))
                if any(_from_http_client_library(_resolve(module, dotted)) for dotted in names):
                    offending.append(f"{info.name}.{where}: {parameter}: {annotation}")
    assert not offending, offending


def test_the_check_sees_an_aiohttp_client_type() -> None:
    module = importlib.import_module("liqo.kube.websocket")
    assert _from_http_client_library(_resolve(module, "aiohttp.ClientWebSocketResponse"))
    assert not _from_http_client_library(_resolve(importlib.import_module("liqo.kube.shell"), "web.AppRunner"))
