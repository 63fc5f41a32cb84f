"""The pod webhook's placement as a MutatingAdmissionPolicy: the API server places pods itself, in process.

:func:`liqo.offloading.pod_webhook.pod_patch` is the definition of what a new pod in an offloaded namespace gets
(the virtual-node toleration, the strategy's required node affinity, merged into the pod's own terms). This
module says the same thing in CEL, as the JSONPatch of a MutatingAdmissionPolicy whose parameter is the
namespace's NamespaceOffloading (``paramRef`` by name, in the pod's namespace).

Why both: a webhook call per pod is an HTTP/1.1 request to the manager, and under a ReplicaSet's burst the API
server's connection pool overflows, so most calls pay a new TLS handshake on each side (docs/offloading.md,
"Pod placement"); with ``failurePolicy: Fail`` a manager that is down also holds up every pod of an offloaded
namespace. The policy costs neither, but it needs ``admissionregistration.k8s.io/v1`` MutatingAdmissionPolicy
(GA in Kubernetes 1.36). So the install registers the policy where the API server serves it and the webhook
where it does not, never both (:func:`liqo.install.manifests.pod_placement`). An integration test holds the
two to the same result over many pods, on a real API server.

Expressions are built from :mod:`liqo.api.names` so a label or taint is named in one place. The values are
plain CEL maps wrapped in ``dyn()``: the API server's CEL wants lists and maps of one type, and the pod's own
terms (typed by its schema) are mixed with ours.
"""

from __future__ import annotations

import orjson

from liqo.api import names

NAME = "liqo-pod-placement"
"""The MutatingAdmissionPolicy and its binding (cluster-scoped)."""

_AFFINITY_PATH = "/spec/affinity"
_NODE_AFFINITY_PATH = f"{_AFFINITY_PATH}/nodeAffinity"
_REQUIRED_PATH = f"{_NODE_AFFINITY_PATH}/requiredDuringSchedulingIgnoredDuringExecution"
_TERMS_PATH = f"{_REQUIRED_PATH}/nodeSelectorTerms"


def _text(value: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL)."""
    return orjson.dumps(value).decode()


def _requirement(*, key: str, operator: str, value: str) -> str:
    return f"{{'key': dyn({key}), 'operator': dyn({_text(operator)}), 'values': dyn([{value}])}}"


def _same(e: str, r: str) -> str:
    """Whether requirement ``e`` (the pod's) is ``r`` (ours, one value): :func:`webhook._requirement_id`."""
    return f"({e}.key == {r}.key && {e}.operator == {r}.operator && {e}.?values.orValue([]) == {r}.values)"


def variables() -> list[dict[str, str]]:
    """The policy's variables, in order (each may use the ones before it)."""
    toleration = names.virtual_node_toleration()
    virtual = _text(names.VIRTUAL_NODE_TYPE)
    node = _text(names.VIRTUAL_NODE)
    local = _requirement(key=virtual, operator="NotIn", value=node)
    remote = _requirement(key=virtual, operator="In", value=node)
    exprs = "t.?matchExpressions.orValue([])"
    implies = f"o.all(r, {exprs}.exists(e, {_same('e', 'r')}))"
    appended = f"dyn(dyn({exprs}) + o.filter(r, !{exprs}.exists(e, {_same('e', 'r')})))"
    merged_term = (
        f"has(t.matchFields) ? dyn({{'matchExpressions': {appended}, 'matchFields': dyn(t.matchFields)}})"
        f" : dyn({{'matchExpressions': {appended}}})"
    )
    return [
        {
            "name": "skip",
            # A pod already bound is not the scheduler's to place; a NamespaceOffloading being deleted
            # means the namespace is going back to plain local scheduling.
            "expression": "(has(object.spec.nodeName) && object.spec.nodeName != '')"
            " || has(params.metadata.deletionTimestamp)",
        },
        {
            "name": "strategy",
            "expression": "params.?spec.?podOffloadingStrategy.orValue('LocalAndRemote')",
        },
        {"name": "selector", "expression": "params.?spec.?clusterSelector.orValue({})"},
        {"name": "local", "expression": f"[{local}]"},
        {
            "name": "remote",
            # The selector's keys sorted, as pod_patch writes them.
            "expression": f"[{remote}] + variables.selector.map(k, k).sort().map(k, "
            f"{_requirement(key='k', operator='In', value='variables.selector[k]')})",
        },
        {
            "name": "ours",
            "expression": "variables.strategy == 'Local' ? [variables.local]"
            " : variables.strategy == 'Remote' ? [variables.remote] : [variables.local, variables.remote]",
        },
        {"name": "fresh", "expression": "variables.ours.map(o, {'matchExpressions': dyn(o)})"},
        {
            "name": "terms",
            "expression": "object.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
            ".?nodeSelectorTerms.orValue([])",
        },
        {
            "name": "merged",
            # Each of the pod's terms AND each of ours (webhook.merge_terms): a term that already implies one
            # of ours stays as it is, the others get our missing requirements appended.
            "expression": f"variables.terms.map(t, variables.ours.exists(o, {implies}) ? [dyn(t)]"
            f" : variables.ours.map(o, {merged_term})).flatten()",
        },
        {"name": "implied", "expression": f"variables.terms.all(t, variables.ours.exists(o, {implies}))"},
        {
            "name": "tolerated",
            "expression": "object.spec.?tolerations.orValue([]).exists(t,"
            f" t.?key.orValue('') == {_text(toleration['key'])}"
            f" && t.?operator.orValue('Equal') == {_text(toleration['operator'])}"
            f" && t.?value.orValue('') == {_text(toleration['value'])}"
            f" && t.?effect.orValue('') == {_text(toleration['effect'])}"
            " && !has(t.tolerationSeconds))",
        },
    ]


def patch_expression() -> str:
    """The JSONPatch: the toleration unless ``Local`` or present, then the affinity at its shallowest gap."""
    toleration = names.virtual_node_toleration()
    value = ", ".join(f"{_text(key)}: {_text(v)}" for key, v in toleration.items())
    tol = f"{{{value}}}"
    required = "{'nodeSelectorTerms': variables.fresh}"
    node_affinity = f"{{'requiredDuringSchedulingIgnoredDuringExecution': {required}}}"
    affinity = f"{{'nodeAffinity': {node_affinity}}}"
    tolerations = (
        "(variables.strategy == 'Local' || variables.tolerated ? []"
        " : object.spec.?tolerations.orValue([]).size() > 0"
        f" ? [JSONPatch{{op: 'add', path: '/spec/tolerations/-', value: {tol}}}]"
        f" : [JSONPatch{{op: 'add', path: '/spec/tolerations', value: [{tol}]}}])"
    )
    affinity_ops = (
        f"(!has(object.spec.affinity) ? [JSONPatch{{op: 'add', path: '{_AFFINITY_PATH}', value: {affinity}}}]"
        " : !has(object.spec.affinity.nodeAffinity)"
        f" ? [JSONPatch{{op: 'add', path: '{_NODE_AFFINITY_PATH}', value: {node_affinity}}}]"
        " : !has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)"
        f" ? [JSONPatch{{op: 'add', path: '{_REQUIRED_PATH}', value: {required}}}]"
        f" : variables.terms.size() == 0 ? [JSONPatch{{op: 'add', path: '{_TERMS_PATH}', value: variables.fresh}}]"
        " : variables.implied ? []"
        f" : [JSONPatch{{op: 'replace', path: '{_TERMS_PATH}', value: variables.merged}}])"
    )
    return f"variables.skip ? [] : {tolerations} + {affinity_ops}"
