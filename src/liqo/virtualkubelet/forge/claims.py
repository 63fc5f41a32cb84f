"""Home claims of the virtual class → their copies in the twin, where the provider's class makes the volume (pure).

A claim of class ``liqo`` whose first pod the scheduler placed on this virtual node (its selected node) is
copied into the twin under its name, so that the offloaded pod, which names the claim, mounts the provider's
volume. The copy is what a peer's claim may be (:data:`liqo.api.storage.CLAIM_RULES`): the provider's class,
the size and access modes, no annotation (the home claim's are the home binder's and scheduler's), nothing
that points at a volume.

The provider's class is the one it offers, or, when it offers several, the one the claim's
``storage.liqo.io/class`` annotation names. A claim that names none of them is not copied, and says why at
home (``NotReflected``) rather than leaving its pod to wait for a claim that never comes.

A copy is written once and never changed: the provider refuses any change of a peer's claim (resizing is not
offered), and deleting it to make it anew would delete its data. The provider's binder writes on it (its
volume, its annotations); those are the provider's, not differences to undo.
"""

from __future__ import annotations

from collections.abc import Sequence

from liqo.api.storage import CLASS_ANNOTATION, VIRTUAL_CLASS
from liqo.api.volumes import selected_node
from liqo.kube.objects import Obj
from liqo.kube.resources import PERSISTENT_VOLUME_CLAIMS
from liqo.virtualkubelet.forge.common import copy_metadata, reflected_by_default

_COPIED_SPEC = ("accessModes", "volumeMode")


def reflectable(claim: Obj, *, node_name: str) -> bool:
    """Whether the virtual kubelet of ``node_name`` copies a home claim: of the virtual class, placed there (pure)."""
    virtual = (claim.get("spec") or {}).get("storageClassName") == VIRTUAL_CLASS
    return reflected_by_default(claim) and virtual and selected_node(claim) == node_name


def provider_class(claim: Obj, offered: Sequence[str]) -> str | None:
    """The provider's class for ``claim``, among the ``offered`` ones; None when there is no single answer (pure)."""
    named = (claim["metadata"].get("annotations") or {}).get(CLASS_ANNOTATION)
    if named is not None:
        return named if named in offered else None
    return offered[0] if len(offered) == 1 else None


def refusal(claim: Obj, offered: Sequence[str], *, provider: str) -> str | None:
    """Why ``claim`` is not copied to ``provider``, said at home; None when it is (pure)."""
    if provider_class(claim, offered) is not None:
        return None
    classes = ", ".join(offered)
    named = (claim["metadata"].get("annotations") or {}).get(CLASS_ANNOTATION)
    if not offered:
        return f"{provider} offers no storage: its pods cannot have volumes of class {VIRTUAL_CLASS}"
    if named is not None:
        return f"{CLASS_ANNOTATION}: {provider} does not offer class {named!r} (it offers {classes})"
    return f"{provider} offers several classes ({classes}): annotate the claim {CLASS_ANNOTATION}: <one of them>"


def reflected_claim(claim: Obj, *, namespace: str, home_cluster_id: str, storage_class: str) -> Obj:
    """The copy of home ``claim`` in twin ``namespace``, of the provider's ``storage_class`` (pure)."""
    copy = copy_metadata(claim, resource=PERSISTENT_VOLUME_CLAIMS, namespace=namespace, home_cluster_id=home_cluster_id)
    copy["metadata"].pop("annotations", None)
    spec = claim.get("spec") or {}
    requests = (spec.get("resources") or {}).get("requests") or {}
    copy["spec"] = {
        "storageClassName": storage_class,
        **{field: spec[field] for field in _COPIED_SPEC if field in spec},
        "resources": {"requests": {"storage": requests["storage"]}} if "storage" in requests else {},
    }
    return copy


def claim_is_current(current: Obj, desired: Obj) -> bool:
    """Whether a copy needs no write: always, once it is ours (see the module's docstring) (pure)."""
    return True


def never_replaced(current: Obj, desired: Obj) -> bool:
    """A claim's copy is never deleted to be made anew: its volume would go with it (pure)."""
    return False
