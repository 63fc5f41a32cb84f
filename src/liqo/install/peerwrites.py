"""What a peer's identity may write in its twins besides ShadowPods, as the provider's API server checks it (pure).

A consumer's virtual kubelet copies Services, EndpointSlices and Ingresses into its twins with the identity
this cluster issued it; the copies it makes are tame (:mod:`liqo.virtualkubelet.forge`), but a hostile peer
runs none of our code and writes whatever that identity may. Those three kinds are read by this cluster's
own machinery with this cluster's authority: kube-proxy forwards to a slice's addresses, an ingress
controller publishes an Ingress on this cluster's addresses and hostnames and forwards the internet to its
backends. Unchecked, a peer makes them a confused deputy: an Ingress on the public class, with a default
backend or this cluster's hostnames, pointing at a Service whose slice lists the API server, a kubelet or
any pod here (docs/security.md, "Services", "Endpoints", "Ingresses").

So the API server refuses, from any ``liqo.io:peer:`` user, in any namespace, before anything is stored:

- a Service other than ``ClusterIP`` (a ``NodePort``/``LoadBalancer`` opens this cluster's nodes or load
  balancers; an ``ExternalName`` is a DNS alias, inside this cluster, of any name), external IPs, load
  balancer fields;
- an EndpointSlice listing an address outside where this cluster sees that peer's pods (the twin's
  ``liqo.io/peer-pods``; absent: every address is outside), or of type ``FQDN`` (a name this cluster
  resolves to whatever it means here);
- an Ingress on a class the provider's SharingPolicy does not offer that consumer (none by default), with
  the legacy class annotation, a default backend, a rule without a host or a host (rules and TLS) outside
  the policy's patterns, or an annotation key outside :data:`BUILTIN_INGRESS_ANNOTATIONS` and the policy's
  list (ingress-nginx's snippets run configuration inside the controller; other keys rewrite its routing);
- a PersistentVolumeClaim of a class the policy does not offer (none by default), of an access mode it does
  not offer for the class, larger than all the class's offer, carrying annotations (the provisioners and the
  binder act on them: ``volume.kubernetes.io/selected-node`` has a volume made at once, with no pod), or
  naming a volume, a label selector, a data source or a volume attributes class of this cluster; and any
  change of a claim's spec or annotations afterwards. How much the claims ask for *together* is the budget's
  (:mod:`liqo.offloading.budget`): a volume of an offered class (``WaitForFirstConsumer`` only) is made for
  the first pod using it, and only the provider's ShadowPod controller makes the consumer's pods.

ValidatingAdmissionPolicies rather than the manager's webhook: no server of ours is on the path, so they
hold while the manager is down, and cost the provider nothing per write but the API server's CEL. What they
read of ours is the twin (``namespaceObject``): a peer can write no namespace, and the provider's manager
keeps the twin's annotations current (:func:`liqo.offloading.twins.twin_annotations`). Everything the rules
need is expressible there: CEL's ``cidr``/``isIP`` for addresses, ``split``/``endsWith`` for the lists and
host patterns.
"""

from __future__ import annotations

from typing import NamedTuple

from liqo.api import names
from liqo.api.storage import CLAIM_RULES


class Validation(NamedTuple):
    """One rule of a ValidatingAdmissionPolicy: the refusal's message, and, optionally, one naming the culprit.

    ``message_expression`` (CEL, a string) says which value broke the rule; ``message`` is shown if it fails.
    """

    expression: str
    message: str
    message_expression: str = ""


TWIN = ("twin", "has(namespaceObject.metadata.annotations) ? namespaceObject.metadata.annotations : {}")
"""The first variable of the policies reading the twin: its annotations (``{}`` without any)."""


def _annotation(key: str) -> str:
    """CEL: the twin's annotation ``key`` (``''`` if absent)."""
    return f"('{key}' in variables.twin ? variables.twin['{key}'] : '')"


def _listed(key: str) -> str:
    """CEL: the twin's comma-separated annotation ``key`` as a list (absent or empty: ``[]``)."""
    return f"({_annotation(key)} == '' ? [] : {_annotation(key)}.split(','))"


# -- Services --------------------------------------------------------------------------------------------

SERVICE_RULES = (
    Validation(
        "!has(object.spec.type) || object.spec.type == 'ClusterIP'",
        "spec.type: a peer's Service must be ClusterIP (NodePort and LoadBalancer open this cluster's nodes and"
        " load balancers; an ExternalName is a DNS alias, inside this cluster, of any name)",
    ),
    Validation(
        "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
        "spec.externalIPs: a peer may not claim addresses for its Service (they would capture this cluster's"
        " traffic to them)",
    ),
    Validation(
        "!has(object.spec.loadBalancerIP) && !has(object.spec.loadBalancerSourceRanges)"
        " && !has(object.spec.loadBalancerClass)",
        "spec.loadBalancer*: a peer's Service has no load balancer here",
    ),
)


# -- EndpointSlices --------------------------------------------------------------------------------------

ENDPOINT_SLICE_VARIABLES = (TWIN, ("block", _annotation(names.PEER_PODS)))
"""``block``: where this cluster sees the peer's pods, as the twin says (``''``: not known)."""
_INSIDE = "(isIP(a) && cidr(variables.block).containsIP(a))"
ENDPOINT_SLICE_RULES = (
    Validation(
        "object.addressType != 'FQDN'",
        "addressType: a peer's EndpointSlice lists IP addresses: a name (FQDN) would be resolved by this cluster,"
        " to whatever it means here",
    ),
    Validation(
        "(variables.block != '' && isCIDR(variables.block)) || !has(object.endpoints) || size(object.endpoints) == 0",
        "endpoints: this cluster does not know where it sees your pods yet (your network, or the block the"
        " network fabric gives them): it accepts no endpoint of yours until it does",
    ),
    Validation(
        "variables.block == '' || !isCIDR(variables.block) || !has(object.endpoints)"
        f" || object.endpoints.all(e, e.addresses.all(a, {_INSIDE}))",
        "endpoints[].addresses: a peer lists only its own pods, at the addresses this cluster sees them at",
        "'endpoints[].addresses: ' + object.endpoints.map(e, e.addresses.filter(a, !"
        + _INSIDE
        + ").join(', ')).filter(s, s != '').join(', ') + ' not in ' + variables.block"
        " + ', where this cluster sees your pods: a peer lists only its own pods'",
    ),
)


# -- Ingresses -------------------------------------------------------------------------------------------

BUILTIN_INGRESS_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
"""Annotation keys a peer's Ingress may always carry: Helm's bookkeeping, which no ingress controller reads."""
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"

INGRESS_VARIABLES = (
    TWIN,
    ("classes", _listed(names.INGRESS_CLASSES)),
    ("hosts", _listed(names.INGRESS_HOSTS)),
    ("annotationKeys", f"{list(BUILTIN_INGRESS_ANNOTATIONS)!r} + {_listed(names.INGRESS_ANNOTATIONS)}"),
)
"""What the twin says the policy offers: classes, host patterns, annotation keys (with the built-in ones)."""


def _host_allowed(host: str) -> str:
    """CEL: whether ``host`` is one of the policy's hosts, or under the domain of one of its ``*.`` patterns.

    ``*.example.com`` covers ``a.example.com``, ``a.b.example.com`` and the Ingress wildcard ``*.example.com``,
    never ``example.com`` itself.
    """
    return f"variables.hosts.exists(p, p == {host} || (p.startsWith('*.') && {host}.endsWith(p.substring(1))))"


_HOSTS_OFFERED = "(size(variables.hosts) == 0 ? 'none' : variables.hosts.join(', '))"
_RULE_HOST_ALLOWED = f"has(r.host) && {_host_allowed('r.host')}"
_TLS_HOSTS_ALLOWED = f"has(t.hosts) && size(t.hosts) > 0 && t.hosts.all(h, {_host_allowed('h')})"
INGRESS_RULES = (
    Validation(
        "has(object.spec.ingressClassName) && object.spec.ingressClassName in variables.classes",
        "spec.ingressClassName: not a class this cluster offers your Ingresses",
        "'spec.ingressClassName: ' + (size(variables.classes) == 0"
        " ? 'this cluster offers your Ingresses no class (its SharingPolicy for you has no ingress.classes):"
        " none is accepted'"
        " : (has(object.spec.ingressClassName) ? object.spec.ingressClassName : 'none') + ' is not a class this"
        " cluster offers your Ingresses (' + variables.classes.join(', ') + ')')",
    ),
    Validation(
        f"!has(object.metadata.annotations) || !('{LEGACY_CLASS_ANNOTATION}' in object.metadata.annotations)",
        f"metadata.annotations[{LEGACY_CLASS_ANNOTATION}]: the legacy class annotation is refused: name an offered"
        " class in spec.ingressClassName",
    ),
    Validation(
        "!has(object.spec.defaultBackend)",
        "spec.defaultBackend: a peer's Ingress has none: it would take every request no rule matches, whatever"
        " the host",
    ),
    Validation(
        f"has(object.spec.rules) && object.spec.rules.all(r, {_RULE_HOST_ALLOWED})",
        "spec.rules[].host: every rule names a host this cluster lets you name",
        "'spec.rules[].host: ' + (has(object.spec.rules) ? object.spec.rules.filter(r, !("
        + _RULE_HOST_ALLOWED
        + ")).map(r, has(r.host) ? r.host : '(a rule without host)').join(', ') : '(no rule)')"
        f" + ' not within the hosts this cluster lets you name: ' + {_HOSTS_OFFERED}",
    ),
    Validation(
        f"!has(object.spec.tls) || object.spec.tls.all(t, {_TLS_HOSTS_ALLOWED})",
        "spec.tls[].hosts: every TLS section names hosts this cluster lets you name",
        "'spec.tls[].hosts: ' + object.spec.tls.filter(t, !("
        + _TLS_HOSTS_ALLOWED
        + ")).map(t, has(t.hosts) && size(t.hosts) > 0 ? t.hosts.join(', ') : '(a section without hosts)')"
        f".join(', ') + ' not within the hosts this cluster lets you name: ' + {_HOSTS_OFFERED}",
    ),
    Validation(
        "!has(object.metadata.annotations) || object.metadata.annotations.all(k, k in variables.annotationKeys)",
        "metadata.annotations: an annotation this cluster does not allow (ingress controllers act on annotations)",
        "'metadata.annotations: ' + object.metadata.annotations.filter(k, !(k in variables.annotationKeys))"
        ".join(', ') + ' not allowed: ingress controllers act on annotations (snippets configure the controller"
        " itself); this cluster allows ' + variables.annotationKeys.join(', ')",
    ),
)


# -- PersistentVolumeClaims ------------------------------------------------------------------------------

_CREATE = "request.operation != 'CREATE'"
CLAIM_VARIABLES = (
    TWIN,
    ("offered", _listed(names.STORAGE_CLASSES)),
    ("storageClass", "has(object.spec.storageClassName) ? object.spec.storageClassName : ''"),
    ("entry", "variables.offered.filter(e, e.split(':')[0] == variables.storageClass)"),
    ("modes", "size(variables.entry) == 0 ? [] : variables.entry[0].split(':')[1].split('|')"),
    ("capacity", "size(variables.entry) == 0 ? '0' : variables.entry[0].split(':')[2]"),
    (
        "requested",
        "has(object.spec.resources) && has(object.spec.resources.requests)"
        " && 'storage' in object.spec.resources.requests ? string(object.spec.resources.requests['storage']) : '0'",
    ),
)
"""What the twin says the policy offers (``<class>:<mode>|<mode>:<capacity>`` each), and the claim's entry in it."""
_CLASSES_OFFERED = "(size(variables.offered) == 0 ? 'none' : variables.offered.map(e, e.split(':')[0]).join(', '))"
_ANNOTATIONS = "(has(object.metadata.annotations) ? object.metadata.annotations : {})"
_OLD_ANNOTATIONS = "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})"
CLAIM_VALIDATIONS = (
    Validation(
        f"{_CREATE} || size(variables.entry) == 1",
        "spec.storageClassName: " + CLAIM_RULES["storageClassName"],
        "'spec.storageClassName: ' + (variables.storageClass == '' ? 'none named' : variables.storageClass)"
        " + ' is not a StorageClass this cluster offers you (' + " + _CLASSES_OFFERED + " + ')'",
    ),
    Validation(
        f"{_CREATE} || size(variables.entry) == 0 || !has(object.spec.accessModes)"
        " || object.spec.accessModes.all(m, m in variables.modes)",
        "spec.accessModes: " + CLAIM_RULES["accessModes"],
        "'spec.accessModes: ' + object.spec.accessModes.join(', ') + ': this cluster offers '"
        " + variables.modes.join(', ') + ' for ' + variables.storageClass",
    ),
    Validation(
        f"{_CREATE} || size(variables.entry) == 0 || !isQuantity(variables.requested)"
        " || !quantity(variables.requested).isGreaterThan(quantity(variables.capacity))",
        "spec.resources.requests.storage: larger than all this cluster offers you of the class",
        "'spec.resources.requests.storage: ' + variables.requested + ' is more than the ' + variables.capacity"
        " + ' of ' + variables.storageClass + ' this cluster offers you in all'",
    ),
    Validation(f"{_CREATE} || size({_ANNOTATIONS}) == 0", "metadata.annotations: " + CLAIM_RULES["annotations"]),
    *(
        Validation(
            f"{_CREATE} || !has(object.spec.{field})"
            + (" || object.spec.volumeName == ''" if field == "volumeName" else ""),
            f"spec.{field}: {CLAIM_RULES[field]}",
        )
        for field in ("volumeName", "selector", "dataSource", "dataSourceRef", "volumeAttributesClassName")
    ),
    Validation(
        f"request.operation != 'UPDATE' || (object.spec == oldObject.spec && {_ANNOTATIONS} == {_OLD_ANNOTATIONS})",
        "spec, metadata.annotations: a peer's claim does not change once made (resizing is not offered)",
    ),
)
