"""No black holes: a pod no slot of the provider holds is held back at home, saying why, until one does."""

from __future__ import annotations

import asyncio
import datetime
import json
from decimal import Decimal
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.quantity import parse_quantity
from liqo.api.resources import NAMESPACE_OFFLOADINGS, SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, PODS
from liqo.sharing.virtualnodes import virtual_node
from liqo.virtualkubelet import fit
from liqo.virtualkubelet.forge import node as forge_node
from liqo.virtualkubelet.forge import pods as forge_pods
from liqo.virtualkubelet.reflection.manager import Addresses, ReflectionManager
from liqo.virtualkubelet.reflection.pods import PodReflector
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def pod(
    *containers: Obj, init: list[Obj] | None = None, overhead: dict[str, str] | None = None, name: str = "big"
) -> Obj:
    spec: Obj = {"nodeName": "liqo-milan", "containers": list(containers) or [container(cpu="1")]}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}"}, "spec": spec}


def container(
    *,
    cpu: str | None = None,
    memory: str | None = None,
    gpu: str | None = None,
    storage: str | None = None,
    restart_policy: str | None = None,
) -> Obj:
    named = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu, "ephemeral-storage": storage}
    requests = {name: amount for name, amount in named.items() if amount is not None}
    body: Obj = {"name": "c", "image": "x", "resources": {"requests": requests}}
    if restart_policy:
        body["restartPolicy"] = restart_policy
    return body


def slot(cpu: str, memory: str = "8Gi", gpu: str | None = None) -> dict[str, Decimal]:
    gpus = {} if gpu is None else {"nvidia.com/gpu": parse_quantity(gpu)}
    return {"cpu": parse_quantity(cpu), "memory": parse_quantity(memory)} | gpus


FOUR = [slot("4")]


# -- fits -------------------------------------------------------------------------------------------------------


def test_a_pod_fits_when_one_slot_holds_all_it_requests() -> None:
    assert fit.fits(pod(container(cpu="4", memory="8Gi")), FOUR)
    assert not fit.fits(pod(container(cpu="4001m")), FOUR)
    assert not fit.fits(pod(container(cpu="1", memory="9Gi")), FOUR)
    # Two slots, each too small in one resource, do not add up to one that holds the pod.
    assert not fit.fits(pod(container(cpu="3", memory="12Gi")), [slot("4", "8Gi"), slot("2", "16Gi")])
    assert fit.fits(pod(container(cpu="2", memory="12Gi")), [slot("4", "8Gi"), slot("2", "16Gi")])


def test_containers_add_up_and_init_containers_count_as_kubernetes_counts_them() -> None:
    assert not fit.fits(pod(container(cpu="2"), container(cpu="2500m")), FOUR)
    # An init container runs alone: 5 CPUs before the 1-CPU container, so the pod needs 5.
    assert not fit.fits(pod(container(cpu="1"), init=[container(cpu="5")]), FOUR)
    assert fit.fits(pod(container(cpu="3"), init=[container(cpu="4")]), FOUR)
    # A sidecar runs alongside: 3 + 1.5.
    assert not fit.fits(pod(container(cpu="3"), init=[container(cpu="1500m", restart_policy="Always")]), FOUR)


def test_the_runtimes_overhead_counts() -> None:
    assert fit.fits(pod(container(cpu="3900m")), FOUR)
    assert not fit.fits(pod(container(cpu="3900m"), overhead={"cpu": "200m"}), FOUR)


def test_extended_resources_count_when_the_slots_describe_them() -> None:
    gpus = [slot("8", gpu="0"), slot("2", gpu="1")]
    assert fit.fits(pod(container(cpu="2", gpu="1")), gpus)
    assert not fit.fits(pod(container(cpu="3", gpu="1")), gpus)
    # A resource the slots do not speak of is left to the provider (the offer does not carry it either).
    assert fit.fits(pod(container(cpu="1", storage="1Ti")), FOUR)


def test_no_slot_nothing_fits_but_unknown_slots_hold_nothing_back() -> None:
    assert not fit.fits(pod(container()), [])
    assert fit.slots_of(None) is None
    assert fit.slots_of({"spec": {"resources": {"cpu": "8"}}}) is None  # a provider publishing no slots
    assert fit.slots_of({"spec": {"largestSlots": [{"cpu": "-1"}]}}) is None  # not a quantity liqo reads
    assert fit.slots_of({"spec": {"largestSlots": [{"cpu": "4", "memory": "8Gi"}]}}) == FOUR
    assert fit.slots_of({"spec": {"largestSlots": []}}) == []


def test_the_message_names_the_request_and_the_largest_slot() -> None:
    big = pod(container(cpu="6", memory="64Mi"))
    assert fit.misfit_message(big, FOUR) == (
        "the pod requests cpu=6, memory=64Mi but no node of the provider has that much free:"
        " its largest slot is cpu=4, memory=8Gi; the pod waits here until a slot holds it"
    )
    message = fit.misfit_message(pod(container(cpu="1", gpu="2")), [slot("4", gpu="1"), slot("2")])
    assert "requests cpu=1, nvidia.com/gpu=2 " in message
    assert "largest slot is cpu=4, memory=8Gi, nvidia.com/gpu=1 (of 2 slots, none holds the pod)" in message
    assert "no node of the provider can take a pod now" in fit.misfit_message(big, [])


REQUESTS = st.fixed_dictionaries(
    {},
    optional={"cpu": st.integers(0, 8000).map(lambda m: f"{m}m"), "memory": st.integers(0, 16).map(lambda g: f"{g}Gi")},
)
SLOTS = st.lists(
    st.builds(slot, st.integers(0, 8000).map(lambda m: f"{m}m"), st.integers(0, 16).map(lambda g: f"{g}Gi")), max_size=3
)


@given(requests=st.lists(REQUESTS, min_size=1, max_size=3), slots=SLOTS, more=SLOTS)
def test_more_or_larger_slots_never_refuse_a_pod_that_fitted(
    requests: list[dict[str, str]], slots: list[dict[str, Decimal]], more: list[dict[str, Decimal]]
) -> None:
    candidate = pod(*(container(**r) for r in requests))
    if fit.fits(candidate, slots):
        assert fit.fits(candidate, [*slots, *more])
        assert fit.fits(candidate, [{r: amount * 2 for r, amount in s.items()} for s in slots])
    else:
        assert fit.misfit_message(candidate, slots)


# -- from the offer to the Node ---------------------------------------------------------------------------------


def offer(**spec: Any) -> Obj:
    return {"metadata": {"name": "m"}, "spec": {"providerClusterName": "milan", "resources": {"cpu": "8"}} | spec}


def test_the_slots_go_from_the_offer_to_the_virtual_node_and_onto_the_node() -> None:
    slots = [{"cpu": "4", "memory": "8Gi"}]
    vn = virtual_node(offer(largestSlots=slots), provider_id="m", foreign_cluster="milan")
    assert vn["spec"]["largestSlots"] == slots
    node = forge_node.node_manifest(vn)
    assert json.loads(node["metadata"]["annotations"][names.LARGEST_SLOTS]) == slots
    # Capacity stays the whole offer: the scheduler may pack many small pods across the provider's nodes.
    status = forge_node.node_status(vn, ready=True, message="", address="127.0.0.1", port=1, now=NOW)
    assert status["status"]["capacity"]["cpu"] == "8"


def test_an_offer_without_slots_gives_a_node_without_them() -> None:
    vn = virtual_node(offer(), provider_id="m", foreign_cluster="milan")
    assert "largestSlots" not in vn["spec"]
    assert "annotations" not in forge_node.node_manifest(vn)["metadata"]
    assert fit.slots_of(vn) is None


def test_a_running_pod_does_not_keep_the_reason_it_once_waited_for() -> None:
    status = forge_pods.home_status({"status": {"phase": "Running"}}, node_address="127.0.0.1")
    waited = {"status": forge_pods.refused_status(reason=fit.DOES_NOT_FIT, message="too big")}
    assert forge_pods.status_differs(waited, status)
    assert forge_pods.status_patch(status)["status"]["reason"] is None  # deletes it in the strategic merge patch
    done = {"status": {k: v for k, v in status.items() if v is not None}}
    assert not forge_pods.status_differs(done, status)


# -- the reflector holds a pod back, then sends it once a slot holds it -------------------------------------------


def offloading() -> Obj:
    twin = {"clusterID": "m", "phase": "Ready", "remoteNamespace": "demo-rome"}
    return {"metadata": {"name": "offloading", "namespace": "demo"}, "status": {"remoteNamespacesConditions": [twin]}}


async def test_a_pod_no_slot_holds_waits_with_its_reason_then_goes_when_the_slots_grow() -> None:
    home = FakeApi((PODS, pod(container(cpu="6", memory="64Mi"))), (NAMESPACE_OFFLOADINGS, offloading()))
    provider = FakeApi()
    current = virtual_node(
        offer(largestSlots=[{"cpu": "4", "memory": "8Gi"}]), provider_id="m", foreign_cluster="milan"
    )
    offloadings = Informer(client=home, resource=NAMESPACE_OFFLOADINGS)
    manager = ReflectionManager(
        home=cast(KubeClient, home),
        provider=cast(KubeClient, provider),
        provider_id="m",
        node_name="liqo-milan",
        home_cluster_id="rome",
        offloadings=offloadings,
        addresses=Addresses(home=None, home_name="rome", provider=lambda: None, provider_name="milan"),
        events=EventRecorder(client=home, component="test"),
    )
    reflector = PodReflector(
        manager=manager,
        node_address="127.0.0.1",
        virtual_node=lambda: current,
    )

    def writes(verb: str, plural: str) -> list[Any]:
        return [call.body for call in [*home.calls, *provider.calls] if (call.verb, call.plural) == (verb, plural)]

    async def held_back() -> bool:
        return bool(writes("create", EVENTS.plural))

    tasks = [asyncio.create_task(offloadings.run())]
    try:
        await offloadings.wait_synced(5)
        manager.register(reflector)
        tasks.append(asyncio.create_task(manager.run()))
        await eventually(held_back, timeout=5, message="the pod held back with an Event")
        [status] = writes("patch", PODS.plural)
        assert status["status"]["reason"] == fit.DOES_NOT_FIT
        assert status["status"]["phase"] == "Pending"
        assert "requests cpu=6, memory=64Mi" in status["status"]["message"]
        assert "largest slot is cpu=4, memory=8Gi" in status["status"]["message"]
        [event] = writes("create", EVENTS.plural)
        assert (event["type"], event["reason"]) == ("Warning", fit.DOES_NOT_FIT)
        assert not writes("create", SHADOW_PODS.plural)  # nothing sent to the provider

        current = virtual_node(
            offer(largestSlots=[{"cpu": "8", "memory": "8Gi"}]), provider_id="m", foreign_cluster="milan"
        )
        reflector.slots_changed()

        async def sent() -> bool:
            return bool(writes("create", SHADOW_PODS.plural))

        await eventually(sent, timeout=5, message="the ShadowPod created once a slot holds the pod")
        [shadow] = writes("create", SHADOW_PODS.plural)
        assert shadow["metadata"] == shadow["metadata"] | {"name": "big", "namespace": "demo-rome"}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
