"""What every pod liqo installs has in common: where it may run, and the container security it keeps (pure).

Every component's pod spec is written in its own module (the manager's and the virtual kubelet's in
:mod:`liqo.install.manifests`, the fabric's, discovery's); these pieces are the ones they must not spell
differently: a node selector honoured by one Deployment and forgotten by another puts a pod where the operator
said none may go.
"""

from __future__ import annotations

from typing import Any

from liqo.install.values import Values


def placement(values: Values) -> dict[str, Any]:
    """The pod spec's ``nodeSelector`` and ``tolerations`` for liqo's pods (absent when the values give none)."""
    fields: dict[str, Any] = {}
    if values.node_selector:
        fields["nodeSelector"] = dict(values.node_selector)
    if values.tolerations:
        fields["tolerations"] = [dict(t) for t in values.tolerations]
    return fields


def restricted_container() -> dict[str, Any]:
    """A container's ``securityContext`` with nothing kept: no root, no capability, a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
