"""The virtual kubelet's pure translations: node, lease, ShadowPod, status back-flow."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.offloading.podsecurity import Reset, Verdict
from liqo.offloading.shadowpods import grace_period, made_for, pod_from_shadow
from liqo.virtualkubelet.forge import node as forge_node
from liqo.virtualkubelet.forge import pods as forge_pods
from liqo.virtualkubelet.forge import tokens as forge_tokens
from liqo.virtualkubelet.reflection.manager import twins_on

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def virtual_node(**resources: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "liqo-milan", "namespace": "liqo-tenant-m"},
        "spec": {
            "clusterID": "m",
            "clusterName": "milan",
            "resources": resources or {"cpu": "4", "memory": "8Gi"},
            "labels": {"zone": "north"},
        },
    }


def home_pod(**spec: Any) -> dict[str, Any]:
    base = {
        "nodeName": "liqo-milan",
        "containers": [{"name": "c", "image": "nginx"}],
        "tolerations": [{"key": names.VIRTUAL_NODE_TAINT, "operator": "Exists"}],
    }
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "demo",
            "uid": "u1",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
        },
        "spec": base | spec,
    }


def test_node_carries_the_labels_taint_and_offer() -> None:
    node = forge_node.node_manifest(virtual_node())
    labels = node["metadata"]["labels"]
    assert labels[names.VIRTUAL_NODE_TYPE] == names.VIRTUAL_NODE
    assert labels[names.REMOTE_CLUSTER_ID] == "m"
    assert labels["zone"] == "north"  # the provider's labels
    assert node["spec"]["taints"] == [{"key": names.VIRTUAL_NODE_TAINT, "value": "true", "effect": "NoExecute"}]
    status = forge_node.node_status(virtual_node(), ready=True, message="ok", address="127.0.0.1", port=1, now=NOW)
    assert (
        status["status"]["capacity"] == status["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    )
    assert status["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 1}}


def test_ready_follows_the_provider_and_keeps_its_transition_time() -> None:
    vn = virtual_node()
    up = forge_node.node_status(vn, ready=True, message="ok", address="a", port=1, now=NOW)
    later = NOW + datetime.timedelta(minutes=5)
    still = forge_node.node_status(vn, ready=True, message="ok", address="a", port=1, now=later, previous=up)
    down = forge_node.node_status(vn, ready=False, message="gone", address="a", port=1, now=later, previous=up)

    def ready(node: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")

    assert ready(still)["lastTransitionTime"] == ready(up)["lastTransitionTime"]
    assert ready(still)["lastHeartbeatTime"] != ready(up)["lastHeartbeatTime"]
    assert (ready(down)["status"], ready(down)["reason"]) == ("False", "ProviderUnreachable")
    assert ready(down)["lastTransitionTime"] != ready(up)["lastTransitionTime"]


def test_lease_is_owned_by_the_node() -> None:
    node = {"metadata": {"name": "liqo-milan", "uid": "n1"}}
    lease = forge_node.node_lease(node, holder="vk", now=NOW)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "n1"
    assert lease["spec"]["renewTime"].startswith("2030-01-01T00:00:00.")


def test_shadow_pod_drops_scheduling_and_home_identity() -> None:
    pod = home_pod(
        priority=100,
        priorityClassName="high",
        serviceAccountName="builder",
        affinity={"nodeAffinity": {}},
        volumes=[{"name": "kube-api-access-x1", "projected": {"sources": []}}, {"name": "data", "emptyDir": {}}],
        containers=[
            {
                "name": "c",
                "image": "nginx",
                "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run"}, {"name": "data"}],
            }
        ],
    )
    shadow = forge_pods.shadow_pod(pod, namespace="demo-abc", home_cluster_id="rome")
    spec = shadow["spec"]["pod"]
    for dropped in ("nodeName", "tolerations", "affinity", "priority", "priorityClassName", "serviceAccountName"):
        assert dropped not in spec
    assert spec["automountServiceAccountToken"] is False
    # The home token comes from the pod-token Secret, mounted where the projected volume was.
    token = {"name": "kube-api-access-x1", "secret": {"secretName": forge_tokens.token_secret_name("web-1")}}
    assert spec["volumes"] == [token, {"name": "data", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == pod["spec"]["containers"][0]["volumeMounts"]
    assert shadow["spec"]["homePodUID"] == "u1"
    assert shadow["metadata"]["namespace"] == "demo-abc"
    assert shadow["metadata"]["labels"] == {"app": "web"} | names.peer_labels("rome")
    assert shadow["metadata"]["annotations"] == {"team": "a"}
    assert pod["spec"]["priority"] == 100  # the home pod is not modified


@given(st.dictionaries(st.sampled_from(["nodeName", "nodeSelector", "hostname", "subdomain", "dnsPolicy"]), st.text()))
def test_shadow_pod_keeps_every_field_but_the_dropped_ones(extra: dict[str, str]) -> None:
    pod = home_pod(**extra)
    spec = forge_pods.shadow_pod(pod, namespace="t", home_cluster_id="r")["spec"]["pod"]
    for key, value in extra.items():
        if key in ("nodeName", "nodeSelector"):
            assert key not in spec
        else:
            assert spec[key] == value


def test_the_provider_pod_is_owned_by_its_shadow_and_names_the_home_pod() -> None:
    shadow = forge_pods.shadow_pod(home_pod(), namespace="t", home_cluster_id="r")
    shadow["metadata"]["uid"] = "s1"
    pod = pod_from_shadow(shadow, verdict=Verdict(resets=(Reset("terminationGracePeriodSeconds", 5, "capped"),)))
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ShadowPod", "s1", True)
    assert pod["metadata"]["labels"][names.SHADOW_POD] == "web-1"
    assert made_for(pod, shadow)
    assert not made_for(pod, shadow | {"metadata": {**shadow["metadata"], "uid": "s2"}})
    assert forge_pods.runs_home_pod(pod, home_pod())
    assert not forge_pods.runs_home_pod(pod, home_pod() | {"metadata": {**home_pod()["metadata"], "uid": "u2"}})
    assert pod["spec"] == shadow["spec"]["pod"] | {"terminationGracePeriodSeconds": 5}


def annotated(value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {} if value is None else {names.GRACE_PERIOD: value}}}


def provider_pod(own: Any = 30) -> dict[str, Any]:
    return {"spec": {"terminationGracePeriodSeconds": own}}


def test_grace_period_annotation() -> None:
    assert grace_period(annotated("7"), provider_pod()) == 7
    assert grace_period(annotated("0"), provider_pod()) == 0
    assert grace_period({"metadata": {}}, provider_pod()) is None
    for malformed in ("-1", "²", "1e9", "٣", "7 ", "", "0x10", "1" * 40, "1" * 5000):
        assert grace_period(annotated(malformed), provider_pod()) is None, malformed


def test_grace_period_never_exceeds_the_pods_own() -> None:
    assert grace_period(annotated("3600"), provider_pod(45)) == 45
    assert grace_period(annotated("999999999999999999"), provider_pod(0)) == 0
    # A pod without one (or with nonsense the API server would never store) gets the API server's default.
    assert grace_period(annotated("3600"), {"spec": {}}) == 30
    assert grace_period(annotated("3600"), provider_pod("60")) == 30
    assert grace_period(annotated("3600"), provider_pod(True)) == 30


@given(value=st.one_of(st.text(), st.from_regex(r"\A[0-9]{1,40}\Z")), own=st.integers(min_value=0, max_value=2**40))
def test_grace_period_of_any_annotation_is_none_or_within_the_pods_own(value: str, own: int) -> None:
    found = grace_period(annotated(value), provider_pod(own))
    assert found is None or 0 <= found <= own
    if value.isascii() and value.isdigit() and len(value) <= 18:
        assert found == min(int(value), own)


def test_shadow_is_current_compares_spec_labels_and_annotations() -> None:
    desired = forge_pods.shadow_pod(home_pod(), namespace="t", home_cluster_id="r")
    read = {**desired, "metadata": {**desired["metadata"], "uid": "s", "resourceVersion": "9"}, "status": {"x": 1}}
    assert forge_pods.shadow_is_current(read, desired)
    changed = forge_pods.shadow_pod(
        home_pod(containers=[{"name": "c", "image": "nginx:2"}]), namespace="t", home_cluster_id="r"
    )
    assert not forge_pods.shadow_is_current(read, changed)


def test_home_status_mirrors_the_remote_pod_with_the_virtual_node_as_host() -> None:
    remote = {
        "metadata": {},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.5",
            "hostIP": "192.168.1.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "restartCount": 2, "ready": True}],
            "nominatedNodeName": "x",
        },
    }
    status = forge_pods.home_status(remote, node_address="127.0.0.1")
    assert status["hostIP"] == "127.0.0.1"
    assert status["containerStatuses"][0]["restartCount"] == 2
    assert "nominatedNodeName" not in status
    home = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert forge_pods.status_differs(home, status)
    home["status"] |= {k: v for k, v in status.items() if k != "conditions"}
    home["status"]["conditions"].append({"type": "Ready", "status": "True"})
    assert not forge_pods.status_differs(home, status)  # the scheduler's PodScheduled condition is not ours to drop


def test_home_status_never_carries_the_providers_pod_scheduled() -> None:
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2030-01-01T00:00:09Z"}
    ready = {"type": "Ready", "status": "True"}
    running = {"status": {"phase": "Running", "conditions": [scheduled, ready]}}
    assert forge_pods.home_status(running, node_address="127.0.0.1")["conditions"] == [ready]
    # Only the provider's PodScheduled: no conditions at all (an empty list would be a write of nothing).
    bound = {"status": {"phase": "Pending", "conditions": [scheduled]}}
    assert "conditions" not in forge_pods.home_status(bound, node_address="127.0.0.1")


def _remote(phase: str = "Pending", *waiting: str, **status: Any) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "state": {"waiting": {"reason": reason}}} for i, reason in enumerate(waiting)]
    return {"status": {"phase": phase, "containerStatuses": containers, **status}}


def test_a_remote_pod_starting_as_it_should_is_no_news_for_home() -> None:
    fresh: dict[str, Any] = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]}}
    assert not forge_pods.news_for_home({"status": {"phase": "Pending"}}, fresh)
    assert not forge_pods.news_for_home({}, fresh)  # not even a status yet
    assert not forge_pods.news_for_home(_remote("Pending", "ContainerCreating"), fresh)
    init_done = {"initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 0}}}]}
    assert not forge_pods.news_for_home(_remote("Pending", "PodInitializing", **init_done), fresh)
    # Running, finished, in trouble: news.
    assert forge_pods.news_for_home(_remote("Running"), fresh)
    assert forge_pods.news_for_home(_remote("Failed"), fresh)
    assert forge_pods.news_for_home(_remote("Pending", "ContainerCreating", "ImagePullBackOff"), fresh)
    init_failed = {"initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 1}}}]}
    assert forge_pods.news_for_home(_remote("Pending", **init_failed), fresh)
    # Something of ours on the home pod to clear: a refusal's reason, an unreachable provider.
    refused = {"status": forge_pods.refused_status(reason="DoesNotFitRemote", message="m")}
    assert forge_pods.news_for_home(_remote("Pending", "ContainerCreating"), refused)
    unreachable = {"status": forge_pods.unreachable_status(message="m")}
    assert forge_pods.news_for_home(_remote("Pending"), unreachable)
    # Home shows it running, and the remote pod starts again (deleted on the provider, re-made): taken back.
    running = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert forge_pods.news_for_home(_remote("Pending", "ContainerCreating"), running)


def test_the_shadow_carries_a_grace_period_only_when_shorter_than_the_pods_own() -> None:
    def deleted(grace: int | None, own: int | None = None) -> dict[str, Any]:
        spec = {} if own is None else {"terminationGracePeriodSeconds": own}
        meta = {} if grace is None else {"deletionGracePeriodSeconds": grace}
        return {"metadata": meta, "spec": spec}

    assert forge_pods.shadow_grace(deleted(30)) is None  # the default, as a scale-down deletes
    assert forge_pods.shadow_grace(deleted(60, own=60)) is None
    assert forge_pods.shadow_grace(deleted(7)) == 7
    assert forge_pods.shadow_grace(deleted(0, own=10)) == 0
    assert forge_pods.shadow_grace(deleted(None)) is None


def test_refused_status_is_pending_with_a_reason() -> None:
    status = forge_pods.refused_status(reason="ProviderRefused", message="hostNetwork pods are refused")
    assert status["phase"] == "Pending"
    assert status["conditions"][0]["reason"] == "ProviderRefused"


def test_what_the_provider_holds_back_shows_at_home_with_its_reason() -> None:
    def shadow(**status: str) -> dict[str, Any]:
        return {"metadata": {"name": "web", "namespace": "twin"}, "status": status}

    assert forge_pods.held_back(shadow()) is None
    assert forge_pods.held_back(shadow(phase="Created")) is None
    waiting = shadow(phase="Waiting", reason="OverBudget", message="cpu requests: the pod requests 400m")
    assert forge_pods.held_back(waiting) == ("OverBudget", "cpu requests: the pod requests 400m")
    assert forge_pods.held_back(shadow(phase="Waiting", reason="NoAcceptedOffer", message="m")) == (
        "NoAcceptedOffer",
        "m",
    )
    # Any other word a provider writes is not ours to show as a reason: a plain refusal, its message kept.
    assert forge_pods.held_back(shadow(phase="Waiting", reason="Running", message="m")) == ("ProviderRefused", "m")
    assert forge_pods.held_back(shadow(phase="Refused", reason="PodRefused", message="m")) == ("ProviderRefused", "m")


def test_twins_on_a_provider_are_the_ready_ones() -> None:
    def offloading(namespace: str, *twins: dict[str, str], deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"namespace": namespace, "name": "offloading"}
        if deleting:
            meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        return {"metadata": meta, "status": {"remoteNamespacesConditions": list(twins)}}

    ready = {"clusterID": "m", "phase": "Ready", "remoteNamespace": "a-r"}
    items = [
        offloading("a", ready, {"clusterID": "n", "phase": "Ready", "remoteNamespace": "a-r"}),
        offloading("b", {"clusterID": "m", "phase": "Conflict", "remoteNamespace": "b"}),
        offloading("c", ready | {"remoteNamespace": "c-r"}, deleting=True),
    ]
    assert twins_on(items, provider_id="m") == {"a": "a-r"}


def test_the_status_patch_replaces_ip_lists_and_merges_conditions() -> None:
    status = forge_pods.home_status(
        {"status": {"podIPs": [{"ip": "10.0.0.3"}], "conditions": [{"type": "Ready", "status": "True"}]}},
        node_address="127.0.0.1",
    )
    patch = forge_pods.status_patch(status)["status"]
    assert patch["podIPs"] == [{"$patch": "replace"}, {"ip": "10.0.0.3"}]
    assert patch["hostIPs"] == [{"$patch": "replace"}, {"ip": "127.0.0.1"}]
    assert patch["conditions"] == [{"type": "Ready", "status": "True"}]
    assert status["podIPs"] == [{"ip": "10.0.0.3"}]  # the status itself is untouched


def test_a_node_is_first_created_with_what_makes_it_ours_and_its_taint_only() -> None:
    claim = forge_node.node_claim(virtual_node())
    assert claim["metadata"] == {
        "name": "liqo-milan",
        "labels": {
            names.MANAGED_BY: names.MANAGED_BY_VALUE,
            names.REMOTE_CLUSTER_ID: "m",
            names.VIRTUAL_NODE_TYPE: "virtual-node",
        },
    }
    assert claim["spec"] == forge_node.node_manifest(virtual_node())["spec"]
    assert forge_node.node_is_ours(claim, provider_id="m")


def test_a_node_is_ours_only_with_liqos_labels_for_that_very_provider() -> None:
    ours = forge_node.node_manifest(virtual_node())
    assert forge_node.node_is_ours(ours, provider_id="m")
    assert not forge_node.node_is_ours(ours, provider_id="n")  # another provider's virtual node
    for missing in (names.MANAGED_BY, names.REMOTE_CLUSTER_ID, names.VIRTUAL_NODE_TYPE):
        labels = {k: v for k, v in ours["metadata"]["labels"].items() if k != missing}
        assert not forge_node.node_is_ours({"metadata": {"name": "liqo-milan", "labels": labels}}, provider_id="m")
    assert not forge_node.node_is_ours({"metadata": {"name": "liqo-milan"}}, provider_id="m")  # a real node


def test_orphans_are_our_virtual_nodes_without_a_virtual_node_of_their_name_and_nothing_else() -> None:
    ours = forge_node.node_manifest(virtual_node())  # liqo-milan, provider m
    other = forge_node.node_manifest(virtual_node() | {"metadata": {"name": "liqo-naples", "namespace": "t"}})
    real = {"metadata": {"name": "worker", "labels": {"kubernetes.io/hostname": "worker"}}}
    no_provider = {"metadata": {"name": "liqo-x", "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}}}
    nodes = [ours, other, real, no_provider]
    assert forge_node.orphans(nodes, wanted={"liqo-milan", "liqo-naples"}) == []
    assert forge_node.orphans(nodes, wanted={"liqo-naples"}) == [ours]
    assert forge_node.orphans(nodes, wanted=set()) == [ours, other]  # never the real node, nor a half-labelled one
    assert forge_node.node_is_ours(other, provider_id=None)
    assert not forge_node.node_is_ours(no_provider, provider_id=None)


def test_the_registered_condition_names_the_squatter_and_keeps_its_transition_time() -> None:
    vn = virtual_node()
    squatter = {"metadata": {"name": "liqo-milan", "labels": {names.REMOTE_CLUSTER_ID: "n", "team": "x"}}}
    taken = forge_node.registration_condition(vn, squatter=squatter, now=NOW)
    assert (taken["type"], taken["status"], taken["reason"]) == ("Registered", "False", "NodeNameTaken")
    assert "Node liqo-milan already exists and is not this provider's virtual node" in taken["message"]
    assert f"{names.REMOTE_CLUSTER_ID}=n" in taken["message"]
    assert taken["lastTransitionTime"] == "2030-01-01T00:00:00Z"
    later = NOW + datetime.timedelta(minutes=5)
    vn["status"] = {"conditions": [taken]}
    assert forge_node.registration_condition(vn, squatter=squatter, now=later) == taken  # unchanged: no write
    registered = forge_node.registration_condition(vn, squatter=None, now=later)
    assert (registered["status"], registered["reason"]) == ("True", "NodeRegistered")
    assert registered["lastTransitionTime"] == "2030-01-01T00:05:00Z"
    bare = forge_node.registration_condition(virtual_node(), squatter={"metadata": {"name": "liqo-milan"}}, now=NOW)
    assert "(no liqo labels)" in bare["message"]
