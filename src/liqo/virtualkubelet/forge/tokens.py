"""A home pod's ServiceAccount token → a Secret in the twin that the remote pod mounts in its place (pure).

The token is a home TokenRequest bound to the pod (it dies with it), so the remote pod talks to the home API
server as it would at home; it is renewed at 80% of its lifetime, as the kubelet renews projected tokens.
"""

from __future__ import annotations

import base64
import datetime
import hashlib

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.kube.resources import SECRETS
from liqo.kube.timefmt import format_time, parse_time

_TOKEN_VOLUME_PREFIX = "kube-api-access-"
"""The projected volume the home ServiceAccount admission adds (token, CA, namespace): the provider mounts
the pod-token Secret in its place, under the same volume name so that the containers' mounts stay as they are."""


TOKEN_SECRETS = f"{names.POD_TOKEN}=true"
"""The label selector of the pod-token Secrets in a twin."""
NOT_TOKEN_SECRETS = f"!{names.POD_TOKEN}"
"""The label selector of every other Secret there (the copies of home Secrets, the provider's own)."""


def is_token_volume(volume: Obj) -> bool:
    """Whether ``volume`` is the projected ServiceAccount volume the home admission adds (pure)."""
    return bool(str(volume.get("name", "")).startswith(_TOKEN_VOLUME_PREFIX) and "projected" in volume)


DEFAULT_TOKEN_SECONDS = 3600
TOKEN_RENEWAL = 0.8
"""Tokens are replaced at this fraction of their lifetime, as the kubelet does for projected tokens."""
_NAME_MAX = 253
_TOKEN_DIGEST_LENGTH = 10


def token_secret_name(pod_name: str) -> str:
    """The pod-token Secret of home pod ``pod_name`` in its twin (pure).

    The digest keeps it apart from the home Secrets copied into the same twin (a ``<pod>-token`` of the user's
    is plausible); the name is cut so that the result is still a valid Secret name.
    """
    suffix = "-token-" + hashlib.sha256(pod_name.encode()).hexdigest()[:_TOKEN_DIGEST_LENGTH]
    return pod_name[: _NAME_MAX - len(suffix)].rstrip("-.") + suffix


def token_volume(home_spec: Obj) -> Obj | None:
    """The projected ServiceAccount volume the home admission added to a pod, if any (pure)."""
    return next((v for v in home_spec.get("volumes") or [] if is_token_volume(v)), None)


def token_seconds(volume: Obj) -> int:
    """The token lifetime the projected volume asks for (pure)."""
    for source in volume["projected"].get("sources") or []:
        token = source.get("serviceAccountToken")
        if token is not None:
            return int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
    return DEFAULT_TOKEN_SECONDS


def service_account_of(home_pod: Obj) -> str:
    """The home ServiceAccount a pod runs as (pure)."""
    spec = home_pod["spec"]
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def token_request(home_pod: Obj, *, seconds: int) -> Obj:
    """The TokenRequest for the pod's ServiceAccount, bound to the pod: it dies with the pod (pure).

    No audiences: the API server's own, as for the projected volume it replaces.
    """
    meta = home_pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds, "boundObjectRef": bound},
    }


def renewal_time(*, issued: datetime.datetime, expires: datetime.datetime) -> datetime.datetime:
    """When a token issued at ``issued`` and expiring at ``expires`` is replaced (pure)."""
    return issued + (expires - issued) * TOKEN_RENEWAL


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def ca_digest(ca: str) -> str:
    """What a pod-token Secret says of the home CA it holds (pure)."""
    return hashlib.sha256(ca.encode()).hexdigest()


def token_secret(
    home_pod: Obj, *, namespace: str, home_cluster_id: str, token: str, ca: str, renew_at: datetime.datetime
) -> Obj:
    """The Secret in twin ``namespace`` the remote pod mounts as its ServiceAccount directory (pure).

    Its keys are the projected volume's (``token``, ``ca.crt``, ``namespace``): the home token, the home CA
    and the home namespace, so that the pod's client speaks to the home API server as at home.
    """
    meta = home_pod["metadata"]
    return {
        "apiVersion": SECRETS.api_version,
        "kind": SECRETS.kind,
        "metadata": {
            "name": token_secret_name(meta["name"]),
            "namespace": namespace,
            "labels": names.peer_labels(home_cluster_id) | {names.POD_TOKEN: "true"},
            "annotations": {
                names.HOME_POD: meta["name"],
                names.HOME_POD_UID: meta["uid"],
                names.RENEW_AT: format_time(renew_at),
                names.TOKEN_CA: ca_digest(ca),
            },
        },
        "type": "Opaque",
        "data": {"token": _b64(token), "ca.crt": _b64(ca), "namespace": _b64(meta["namespace"])},
    }


def is_pod_token(secret: Obj, *, home_cluster_id: str) -> bool:
    """Whether ``secret`` is a pod-token Secret this virtual kubelet keeps (pure)."""
    labels = secret["metadata"].get("labels") or {}
    return bool(labels.get(names.POD_TOKEN) == "true" and labels.get(names.REMOTE_CLUSTER_ID) == home_cluster_id)


def token_owner_keys(secret: Obj, *, home_namespace: str, home_cluster_id: str) -> list[str]:
    """The key (``namespace/name``) of the home pod a pod-token Secret of the twin is for; none for others (pure)."""
    if not is_pod_token(secret, home_cluster_id=home_cluster_id):
        return []
    pod = (secret["metadata"].get("annotations") or {}).get(names.HOME_POD)
    return [f"{home_namespace}/{pod}"] if pod else []


def token_renew_at(secret: Obj, home_pod: Obj, *, ca: str) -> datetime.datetime | None:
    """When the pod-token Secret's token must be replaced; None when it must be now (pure).

    Now, too, when the Secret was written for a deleted namesake of the pod (its token died with it) or with
    another CA. Read from the Secret's metadata alone: the cache of pod-token Secrets keeps no ``data``
    (10 000 tokens and CA copies are tens of MiB), and its namespace is the twin of the pod's.
    """
    annotations = secret["metadata"].get("annotations") or {}
    same_pod = annotations.get(names.HOME_POD_UID) == home_pod["metadata"]["uid"]
    same_ca = annotations.get(names.TOKEN_CA) == ca_digest(ca)
    renew = annotations.get(names.RENEW_AT)
    if not (same_pod and same_ca) or not renew:
        return None
    try:
        return parse_time(renew)
    except ValueError:
        return None
