"""Pod placement as the real API server applies it, on the session cluster with liqo installed.

Pods are created through the API server and read back: whatever they carry was put there either by the
MutatingAdmissionPolicy ``liqoctl install`` registers where the API server serves the kind (ours does), or by
the manager's webhook, over HTTPS, as registered where it does not (the ``webhook`` run registers it in place
of the policy, as such an install would). Every test runs with both, and one holds both to
:func:`liqo.offloading.pod_webhook.pod_patch` over many pods. NamespaceOffloadings are created by hand (with the
namespace's ``liqo.io/scheduling-enabled`` label, as the offloading controller would), so placement is tested
on its own. The module installs liqo on the session cluster and removes it at the end; the last test checks
what ``liqoctl uninstall`` leaves.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, WEBHOOK_SERVICE
from liqo.api.resources import NAMESPACE_OFFLOADINGS, SHADOW_PODS
from liqo.install import manifests
from liqo.install.installer import PLACEMENT_POLICY, InstallOptions, install, uninstall
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from liqo.localclusters import clusters
from liqo.localclusters.launch import detect
from liqo.offloading import placementpolicy, registration
from liqo.offloading.pod_webhook import pod_patch
from tests.integration.helpers import LocalCluster, liqoctl_run, unique
from tests.shared import apply_patch, eventually

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TYPE = names.VIRTUAL_NODE_TYPE
LOCAL_TERM = {"matchExpressions": [{"key": TYPE, "operator": "NotIn", "values": [names.VIRTUAL_NODE]}]}
SELECTOR = {"topology.liqo.io/region": "eu"}
REMOTE_TERM = {
    "matchExpressions": [
        {"key": TYPE, "operator": "In", "values": [names.VIRTUAL_NODE]},
        {"key": "topology.liqo.io/region", "operator": "In", "values": ["eu"]},
    ]
}


REMOTE_TERM_ALONE = {"matchExpressions": REMOTE_TERM["matchExpressions"][:1]}
"""The ``Remote`` term of a NamespaceOffloading without a cluster selector."""
_REQUIREMENTS = [
    {"key": TYPE, "operator": "In", "values": [names.VIRTUAL_NODE]},
    {"key": TYPE, "operator": "NotIn", "values": [names.VIRTUAL_NODE]},
    {"key": "topology.liqo.io/region", "operator": "In", "values": ["eu"]},
    {"key": "disk", "operator": "In", "values": ["ssd", "nvme"]},
    {"key": "gpu", "operator": "Exists"},
]


def random_placement(rnd: random.Random) -> Obj:
    """Tolerations and affinity a user may write, ours among them sometimes."""
    spec: Obj = {}
    ours_for_a_while = {**names.virtual_node_toleration(), "tolerationSeconds": 5}
    tolerations = rnd.choice(
        [None, [], [names.virtual_node_toleration()], [{"key": "x", "operator": "Exists"}], [ours_for_a_while]]
    )
    if tolerations is not None:
        spec["tolerations"] = tolerations
    shape = rnd.randrange(5)
    if shape == 1:
        spec["affinity"] = {"podAntiAffinity": {}}
    elif shape == 2:
        preferred = [{"weight": 1, "preference": {"matchExpressions": [_REQUIREMENTS[3]]}}]
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    elif shape >= 3:
        terms = []
        for _ in range(rnd.randint(1, 3)):
            term: Obj = {"matchExpressions": rnd.sample(_REQUIREMENTS, rnd.randint(1, 3))}
            if rnd.random() < 0.3:
                term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
            terms.append(term)
        spec["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    return spec


def placement_of(spec: Obj) -> tuple[Any, ...]:
    """What placement decides: the required terms, our toleration's count, and the rest of the affinity."""
    affinity = dict(spec.get("affinity") or {})
    node_affinity = dict(affinity.pop("nodeAffinity", None) or {})
    return (
        required_terms({"spec": spec}),
        ours({"spec": spec}),
        node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
        affinity,
    )


@pytest.fixture(scope="module", params=["policy", "webhook"])
def placement(request: pytest.FixtureRequest) -> str:
    """What places pods in this run of the module."""
    return str(request.param)


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, placement: str) -> Iterator[LocalCluster]:
    """liqo on the session cluster for this module; uninstalled afterwards (a no-op if a test did)."""

    async def run(action: Callable[[KubeClient], Awaitable[object]]) -> None:
        async with cluster.client() as client:
            await action(client)

    asyncio.run(
        run(lambda c: install(c, InstallOptions(identity_ttl=600), progress=lambda _: None, launch=detect(c.server)))
    )
    if placement == "webhook":
        asyncio.run(run(register_webhook_instead))
    yield cluster
    asyncio.run(run(lambda c: uninstall(c, purge=False, progress=lambda _: None, launch=detect(c.server))))


async def register_webhook_instead(kube: KubeClient) -> None:
    """What an install on an API server without MutatingAdmissionPolicy registers: the pod webhook."""
    for resource, name in PLACEMENT_POLICY:
        await kube.delete(resource, name)
    validator = await kube.get(VALIDATING_WEBHOOK_CONFIGURATIONS, registration.VALIDATING_CONFIGURATION)
    client_config = validator["webhooks"][0]["clientConfig"]
    url = client_config["url"].replace(registration.VALIDATE_PATH, registration.PATH)
    await kube.create(
        MUTATING_WEBHOOK_CONFIGURATIONS,
        manifests.pod_webhook_configuration(client_config={**client_config, "url": url}),
    )


NamespaceFactory = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_namespace(installed: LocalCluster, kube: KubeClient) -> AsyncIterator[NamespaceFactory]:
    """Namespaces (labelled for offloading or not, with a NamespaceOffloading or not), removed afterwards."""
    made: list[str] = []

    async def make(*, labelled: bool, strategy: str | None = None, selector: dict[str, str] | None = None) -> str:
        name = unique("wh")
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        made.append(name)
        if strategy is not None:
            spec: Obj = {"podOffloadingStrategy": strategy, "clusterSelector": selector or {}}
            await kube.create(
                NAMESPACE_OFFLOADINGS,
                {
                    "apiVersion": NAMESPACE_OFFLOADINGS.api_version,
                    "kind": NAMESPACE_OFFLOADINGS.kind,
                    "metadata": {"name": names.OFFLOADING, "namespace": name},
                    "spec": spec,
                },
            )
        if labelled:  # after the NamespaceOffloading, as the offloading controller does (it unlabels otherwise)
            await kube.patch(NAMESPACES, name, {"metadata": {"labels": {names.SCHEDULING_ENABLED: "true"}}})

        async def has_default_service_account() -> bool:
            try:
                await kube.get(SERVICE_ACCOUNTS, "default", namespace=name)
            except NotFoundError:
                return False
            return True

        await eventually(has_default_service_account, timeout=30, message=f"default ServiceAccount in {name}")

        async def webhook_consulted() -> bool:
            # The API server matches namespaces from its own cache: a dry run tells when it sees the label.
            return required_terms(await kube.create(PODS, pod(name), dry_run=True)) is not None

        if labelled and strategy is not None:
            await eventually(webhook_consulted, timeout=30, message=f"the webhook is called for pods in {name}")
        return name

    yield make
    # NamespaceOffloadings first, while the manager runs: the offloading controller may hold a finalizer.
    for name in made:
        with contextlib.suppress(NotFoundError):
            await kube.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=name)
    for name in made:

        async def offloading_gone(name: str = name) -> bool:
            try:
                await kube.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=name)
            except NotFoundError:
                return True
            return False

        await eventually(offloading_gone, timeout=60, message=f"NamespaceOffloading of {name} deleted")
        with contextlib.suppress(NotFoundError):
            await kube.delete(NAMESPACES, name)


def pod(namespace: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "web-", "namespace": namespace},
        "spec": {"containers": [{"name": "web", "image": "nginx"}], **spec},
    }


async def create_pod(kube: KubeClient, namespace: str, **spec: Any) -> Obj:
    created = await kube.create(PODS, pod(namespace, **spec))
    return await kube.get(PODS, created["metadata"]["name"], namespace=namespace)


def required_terms(pod_obj: Obj) -> list[Obj] | None:
    node_affinity = (pod_obj["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    terms: list[Obj] | None = (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms")
    return terms


def ours(pod_obj: Obj) -> int:
    return sum(1 for t in pod_obj["spec"].get("tolerations") or [] if t == names.virtual_node_toleration())


@pytest.mark.parametrize(
    ("strategy", "tolerated", "terms"),
    [
        ("Remote", True, [REMOTE_TERM]),
        ("LocalAndRemote", True, [LOCAL_TERM, REMOTE_TERM]),
        ("Local", False, [LOCAL_TERM]),
    ],
)
async def test_the_api_server_has_the_webhook_place_new_pods_by_strategy(
    kube: KubeClient, make_namespace: NamespaceFactory, strategy: str, tolerated: bool, terms: list[Obj]
) -> None:
    namespace = await make_namespace(labelled=True, strategy=strategy, selector=SELECTOR)
    created = await create_pod(kube, namespace)
    assert ours(created) == (1 if tolerated else 0)
    assert required_terms(created) == terms
    # The API server's own default tolerations (not-ready, unreachable) are still there.
    assert {t.get("key") for t in created["spec"]["tolerations"]} >= {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }


async def test_the_pods_own_affinity_and_tolerations_are_kept_and_anded(
    kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    namespace = await make_namespace(labelled=True, strategy="Remote", selector=SELECTOR)
    own_term = {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
    own_toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    created = await create_pod(
        kube,
        namespace,
        tolerations=[own_toleration, names.virtual_node_toleration()],
        affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [own_term]}}},
    )
    assert own_toleration in created["spec"]["tolerations"]
    assert ours(created) == 1  # not duplicated
    assert required_terms(created) == [
        {"matchExpressions": own_term["matchExpressions"] + REMOTE_TERM["matchExpressions"]}
    ]


async def test_pods_outside_offloaded_namespaces_are_not_touched(
    kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    namespace = await make_namespace(labelled=False)
    created = await create_pod(kube, namespace)
    assert ours(created) == 0
    assert required_terms(created) is None


async def test_the_api_server_places_pods_as_pod_patch_says(kube: KubeClient, make_namespace: NamespaceFactory) -> None:
    """Random pods (their own tolerations, affinities, terms with and without ours) against the definition."""
    offloadings: dict[str, Obj] = {}
    for strategy, selector in [
        ("Remote", {}),
        ("LocalAndRemote", SELECTOR),
        ("Local", {}),
        ("Remote", {"b": "1", "a": "2"}),
    ]:
        namespace = await make_namespace(labelled=True, strategy=strategy, selector=selector)
        offloadings[namespace] = await kube.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace)
    rnd = random.Random(12)
    for n in range(120):
        namespace = list(offloadings)[n % len(offloadings)]
        asked = pod(namespace, **random_placement(rnd))
        placed = (await kube.create(PODS, asked, dry_run=True))["spec"]
        expected = apply_patch(asked, pod_patch(pod=asked, offloading=offloadings[namespace]))["spec"]
        assert placement_of(placed) == placement_of(expected), (offloadings[namespace]["spec"], asked["spec"])


async def test_with_the_manager_down_only_the_webhook_holds_offloaded_pods(
    installed: LocalCluster, placement: str, kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    offloaded_ns = await make_namespace(labelled=True, strategy="Remote")
    plain = await make_namespace(labelled=False)
    await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=False)
    try:
        if placement == "webhook":
            with pytest.raises(ApiError) as refused:
                await kube.create(PODS, pod(offloaded_ns))
            assert f'failed calling webhook "{registration.WEBHOOK_NAME}"' in refused.value.message
        else:  # the API server places them itself
            assert required_terms(await create_pod(kube, offloaded_ns)) == [REMOTE_TERM_ALONE]
        assert required_terms(await create_pod(kube, plain)) is None
    finally:
        await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=True)

    placed: list[Obj] = []

    async def admitted_and_placed() -> bool:
        try:  # the restarted manager refuses pods until its NamespaceOffloading cache is synced
            placed.append(await create_pod(kube, offloaded_ns))
        except ApiError:
            return False
        return True

    await eventually(admitted_and_placed, timeout=30, message="pods admitted again once the manager is back")
    assert required_terms(placed[-1]) == [REMOTE_TERM_ALONE]


async def test_a_namespace_offloading_being_deleted_places_new_pods_no_more(
    installed: LocalCluster, placement: str, kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    """The policy's skip on a terminating parameter, alone: with the manager stopped nothing unlabels the namespace."""
    if placement == "webhook":
        pytest.skip("the webhook cannot answer with the manager stopped; pod_patch's skip is unit-tested")
    hold = {"metadata": {"finalizers": ["test.liqo.io/hold"]}}
    # Stopped first: running, the offloading controller could see the label before the NamespaceOffloading (two
    # watches) and take it off until the next event, and the manager would stop in between (s6 saw it).
    await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=False)
    try:
        namespace = await make_namespace(labelled=True, strategy="Remote")
        try:
            await kube.patch(NAMESPACE_OFFLOADINGS, names.OFFLOADING, hold, namespace=namespace)
            await kube.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace)
            labels = (await kube.get(NAMESPACES, namespace))["metadata"]["labels"]
            assert labels.get(names.SCHEDULING_ENABLED) == "true"  # still bound: only the parameter says "going"

            async def placed_locally() -> bool:
                # The API server sees the deletionTimestamp from its informer on NamespaceOffloadings.
                dry = await kube.create(PODS, pod(namespace), dry_run=True)
                return required_terms(dry) is None and ours(dry) == 0

            await eventually(placed_locally, timeout=30, message="a pod of a namespace going back to local, left alone")
        finally:
            with contextlib.suppress(NotFoundError):
                await kube.patch(
                    NAMESPACE_OFFLOADINGS, names.OFFLOADING, {"metadata": {"finalizers": None}}, namespace=namespace
                )
    finally:
        await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=True)


async def test_with_the_manager_down_a_shadow_pods_bookkeeping_passes_and_its_pod_cannot_change(
    installed: LocalCluster, placement: str, kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    """The ShadowPod webhook's match condition: the API server sends it only what its verdict judges."""
    if placement == "webhook":
        pytest.skip("the ShadowPod webhook is registered the same way whatever places pods")
    namespace = await make_namespace(labelled=False)
    name = unique("shp")
    # Made before the namespace looks like a twin, so that nothing judges it; no label, so no controller.
    await kube.create(
        SHADOW_PODS,
        {
            "apiVersion": SHADOW_PODS.api_version,
            "kind": SHADOW_PODS.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pod": {"containers": [{"name": "c", "image": "nginx"}]}, "homePodUID": "u0"},
        },
    )
    webhook_down = f'failed calling webhook "{registration.VALIDATING_WEBHOOK_NAME}"'

    async def answer_to_a_spec_change() -> str:
        try:
            await kube.patch(SHADOW_PODS, name, {"spec": {"homePodUID": unique("u")}}, namespace=namespace)
        except ApiError as exc:
            return exc.message
        return "allowed"

    await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=False)
    try:
        # A twin once the manager is down: running, it removes the twin of a consumer it has no peering with
        # (ShadowPod and all), and under load it did so before it stopped: every answer was then "not found".
        twin_labels = {names.REMOTE_CLUSTER_ID: "nobody", names.ORIGIN_NAMESPACE: "elsewhere"}
        await kube.patch(NAMESPACES, namespace, {"metadata": {"labels": twin_labels}})
        answers: list[str] = []

        async def sent_to_the_webhook() -> bool:
            answers.append(await answer_to_a_spec_change())
            return webhook_down in answers[-1]

        def last_answer() -> str:
            return (
                f"a ShadowPod spec change sent to the stopped webhook; {len(answers)} answers, the last: {answers[-1]}"
            )

        await eventually(sent_to_the_webhook, timeout=30, message=last_answer)
        # Labels, whatever their keys (one off the allowlist is left off the pod, not refused): not sent.
        labels = {"kept": "yes", "sidecar.istio.io/inject": "true"}
        hold = {"metadata": {"finalizers": ["test.liqo.io/hold"], "labels": labels}}
        await kube.patch(SHADOW_PODS, name, hold, namespace=namespace)  # not sent: would fail like the spec change
        await kube.patch(SHADOW_PODS, name, {"metadata": {"finalizers": None}}, namespace=namespace)
        # The virtual kubelet's grace period before a deletion: liqo's bookkeeping, not sent either; any
        # other annotation is (the pod would carry it).
        for grace in ("5", None):
            annotations = {"metadata": {"annotations": {names.GRACE_PERIOD: grace}}}
            await kube.patch(SHADOW_PODS, name, annotations, namespace=namespace)
        restarted = {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"}}}
        with pytest.raises(ApiError) as caught:
            await kube.patch(SHADOW_PODS, name, restarted, namespace=namespace)
        assert webhook_down in caught.value.message
        assert webhook_down in await answer_to_a_spec_change()
    finally:
        await asyncio.to_thread(clusters.set_components, installed.name, [MANAGER], enabled=True)

    async def manager_back() -> bool:
        # Back, it allows the change (the default policy for consumer "nobody"), or has already removed the
        # twin of a consumer it has no peering with, ShadowPod and all (not found): only it does either.
        return webhook_down not in await answer_to_a_spec_change()

    await eventually(manager_back, timeout=30, message="the ShadowPod webhook answering again")


async def test_the_manager_publishes_a_shared_serving_ca_for_a_service_webhook(
    installed: LocalCluster, kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    """The real-cluster path, minus the Deployment: the Secret every replica shares, the caBundle patch."""
    namespace = await make_namespace(labelled=False)
    dns = registration.service_dns_names(service=WEBHOOK_SERVICE, namespace=namespace)
    pairs = await asyncio.gather(
        *(registration.shared_serving_pair(kube, namespace=namespace, dns_names=dns, labels={}) for _ in range(3))
    )
    assert len(set(pairs)) == 1  # concurrent replicas end up serving the same pair
    stored = await kube.get(SECRETS, registration.SERVING_SECRET, namespace=namespace)
    assert registration.pair_from_secret(stored) == pairs[0]

    name = unique("liqo-test-mutator")
    configuration = manifests.pod_webhook_configuration(
        client_config={"service": {"namespace": namespace, "name": WEBHOOK_SERVICE, "path": "/mutate/pods"}}
    )
    configuration["metadata"]["name"] = name
    hook = configuration["webhooks"][0]
    hook["namespaceSelector"] = {"matchLabels": {unique("never"): "true"}}  # this test's only
    hook["failurePolicy"] = "Ignore"
    await kube.create(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)
    try:
        assert await registration.publish_ca_bundle(kube, ca_pem=pairs[0].ca, name=name)
        published = await kube.get(MUTATING_WEBHOOK_CONFIGURATIONS, name)
        client_config = published["webhooks"][0]["clientConfig"]
        assert base64.b64decode(client_config["caBundle"]).decode() == pairs[0].ca
        assert client_config["service"]["name"] == WEBHOOK_SERVICE
        assert not await registration.publish_ca_bundle(kube, ca_pem=pairs[0].ca, name=name)  # already there
    finally:
        await kube.delete(MUTATING_WEBHOOK_CONFIGURATIONS, name)


async def test_install_dry_run_shows_it_and_uninstall_removes_it(
    installed: LocalCluster, kube: KubeClient, make_namespace: NamespaceFactory
) -> None:
    """Last in the module: it uninstalls liqo (the module fixture's own uninstall is then a no-op)."""
    kubeconfig = f"--kubeconfig={installed.kubeconfig}"
    printed = await asyncio.to_thread(liqoctl_run, "install", "--dry-run", kubeconfig)
    assert printed.returncode == 0, printed.stderr
    # Our API server serves MutatingAdmissionPolicy: the install places pods with it, not the webhook.
    assert "kind: MutatingAdmissionPolicy\n" in printed.stdout
    assert f"name: {placementpolicy.NAME}" in printed.stdout
    assert "kind: MutatingWebhookConfiguration" not in printed.stdout
    assert "kind: ValidatingWebhookConfiguration" in printed.stdout
    assert f"name: {registration.VALIDATING_CONFIGURATION}" in printed.stdout

    labelled = await make_namespace(labelled=True)
    removed = await asyncio.to_thread(liqoctl_run, "uninstall", kubeconfig)
    assert removed.returncode == 0, removed.stderr
    for resource, name in (*PLACEMENT_POLICY, *((r, n) for r, n, _ in registration.REGISTRATIONS)):
        with pytest.raises(NotFoundError):
            await kube.get(resource, name)
    # Nobody is left to answer, and nobody is asked: pods in labelled namespaces are created as they are.
    assert required_terms(await create_pod(kube, labelled)) is None
