"""Whatever a peer sends, the provider answers or refuses: no crash, no side effect (docs/security.md).

Hypothesis writes the peer's input; the real API server and milan's real manager take it, exactly as a
hostile rome would reach them: the authentication endpoint (raw JSON, and signed handshakes whose fields are
anything), ShadowPods through the API server and milan's webhook (dry-run: the webhook is called, nothing
is stored), NamespaceMaps and NetworkConfigs written with rome's own identity (rome's manager and virtual
kubelet stopped, so nothing of rome's corrects them). After each example: no 5xx, nothing created for a
refusal, no twin outside what milan gives, and milan's manager never restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.resources import FOREIGN_CLUSTERS, NAMESPACE_MAPS, NETWORK_CONFIGS, SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError
from liqo.kube.objects import Obj
from liqo.kube.resources import CSRS, NAMESPACES
from liqo.localclusters import clusters
from liqo.network.links import InvalidWord, check_peer_word, read_word
from liqo.peering import operations
from liqo.peering.tokens import new_token
from tests.integration.helpers import Offloaded, Site, from_address, offloaded_to, signed_identity_request, stopped
from tests.shared import api_pods, eventually

pytestmark = pytest.mark.timeout(900)
# One peering serves every example (the fixtures are the module's, by design); a failing example is printed
# as found: shrinking one through real clusters would take longer than the whole suite.
FUZZ = settings(
    max_examples=int(os.environ.get("LIQO_FUZZ_EXAMPLES", "40")),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
WRITES = settings(FUZZ, max_examples=max(1, FUZZ.max_examples * 3 // 10))
"""Examples that write (and wait for milan's controller) are slower: fewer of them. ``LIQO_FUZZ_EXAMPLES=400``
runs ten times as many of each, for a longer hunt by hand."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(max_size=24),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON document (as orjson and the API server take it)."""

POD_FIELDS = [
    "volumes", "hostPath", "nfs", "csi", "securityContext", "privileged", "hostNetwork", "nodeName",
    "tolerations", "resources", "requests", "limits", "cpu", "containers", "initContainers", "image",
    "affinity", "priorityClassName", "ephemeralContainers", "runtimeClassName", "serviceAccountName",
    "capabilities", "add", "sysctls", "ports", "hostPort", "overhead", "projected", "sources",
]  # fmt: skip
"""Keys a mutation prefers: where the verdict looks."""


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[Any], keys: list[str]) -> Any:
    """``base``'s value with one place, at any depth, replaced by any JSON."""
    document = copy.deepcopy(draw(base))
    node = document
    for _ in range(draw(st.integers(0, 4))):
        children = (
            [k for k, v in node.items() if isinstance(v, dict | list)]
            if isinstance(node, dict)
            else [i for i, v in enumerate(node) if isinstance(v, dict | list)]
        )
        if not children:
            break
        node = node[draw(st.sampled_from(children))]
    if isinstance(node, dict):
        node[draw(st.sampled_from(keys) | st.text(max_size=8))] = draw(json_values)
    elif node:
        node[draw(st.integers(0, len(node) - 1))] = draw(json_values)
    return document


async def manager_restarts(site: Site) -> tuple[int, Any]:
    component = (await asyncio.to_thread(clusters.info, site.cluster.name)).components[MANAGER]
    return int(component.get("restarts") or 0), (component.get("process") or {}).get("pid")


# -- the authentication endpoint -------------------------------------------------------------------------


async def footprint(milan: KubeClient) -> tuple[int, int, int]:
    """What a handshake would create on milan: tenant namespaces, ForeignClusters, CSRs."""
    tenants, _ = await milan.list_all(NAMESPACES, label_selector=f"{names.TENANT}=true")
    fcs, _ = await milan.list_all(FOREIGN_CLUSTERS)
    csrs, _ = await milan.list_all(CSRS, label_selector=names.REMOTE_CLUSTER_ID)
    return len(tenants), len(fcs), len(csrs)


@pytest.fixture
async def auth_url(milan: KubeClient) -> str:
    return (await operations.installed(milan, role="provider")).auth_url


SOURCES = (str(address) for address in ipaddress.ip_network("127.2.0.0/16").hosts())
"""Loopback addresses, one per example of the endpoint's fuzz."""

HANDSHAKE_FIELDS = ["clusterID", "clusterName", "nonce", "csr", "publicKey", "network", "authURL", "token"]


@FUZZ
@given(
    raw=st.dictionaries(st.sampled_from(HANDSHAKE_FIELDS) | st.text(max_size=8), json_values, max_size=8) | json_values,
    fields=st.dictionaries(st.sampled_from(HANDSHAKE_FIELDS[:6]), json_values, min_size=1, max_size=3),
)
async def test_the_auth_endpoint_refuses_any_malformed_handshake_and_creates_nothing(
    sites: dict[str, Site], milan: KubeClient, auth_url: str, raw: Any, fields: dict[str, Any]
) -> None:
    before, manager = await footprint(milan), await manager_restarts(sites["milan"])
    # Each example from an address of its own: milan throttles each address past a burst, which would
    # answer the later examples before their input is looked at.
    source = next(SOURCES)
    async with from_address(source) as session:
        for path in ("/identity", "/nonce"):
            async with session.post(f"{auth_url}{path}", data=orjson.dumps(raw)) as response:
                assert response.status < 500, (path, response.status, await response.text())
                assert response.status >= 400 or path == "/nonce"
    # Well signed by a fresh key, with a token milan never minted: only the endpoint's checks of ``fields`` stand.
    status, answer = await signed_identity_request(
        auth_url, consumer=str(uuid.uuid4()), key=ClusterKey.generate(), token=new_token(), source=source, **fields
    )
    assert 400 <= status < 500, (status, answer)
    assert isinstance(answer, dict)
    assert answer.get("reason"), answer
    assert await footprint(milan) == before
    assert await manager_restarts(sites["milan"]) == manager


# -- ShadowPods, NamespaceMaps and NetworkConfigs with rome's identity -----------------------------------


@pytest.fixture(scope="module")
def rome_on_milan(sites: dict[str, Site]) -> Iterator[Offloaded]:
    """rome offloaded to milan for the module, rome's manager and virtual kubelet stopped meanwhile.

    A module's worth of one peering: its own event loop, run for the set-up and the tear-down only.
    """

    async def hold(done: asyncio.Event, made: list[Offloaded]) -> None:
        async with (
            offloaded_to(sites["rome"], sites["milan"], strategy="Remote", prefix="fuzz") as offloaded,
            stopped(sites["rome"], MANAGER, VIRTUAL_KUBELET),
        ):
            made.append(offloaded)
            await done.wait()

    loop = asyncio.new_event_loop()
    done, made = asyncio.Event(), list[Offloaded]()
    held = loop.create_task(hold(done, made))

    async def ready() -> bool:
        return bool(made) or held.done()

    loop.run_until_complete(eventually(ready, timeout=300, message="rome offloaded to milan"))
    try:
        if held.done():
            held.result()  # the set-up failed: say why
        yield made[0]
    finally:
        done.set()
        loop.run_until_complete(held)
        loop.close()


async def outcome(write: Awaitable[Obj]) -> Obj | ApiError:
    """What the API server made of a write: the object, or its refusal."""
    try:
        return await write
    except ApiError as exc:
        return exc


@pytest.fixture
async def as_rome(sites: dict[str, Site], rome: KubeClient) -> AsyncIterator[KubeClient]:
    async with KubeClient.from_kubeconfig_dict(
        await operations.peer_kubeconfig(rome, sites["milan"].cluster_id)
    ) as client:
        yield client


def shadow_pod(twin: str, consumer_id: str, pod: Any) -> Obj:
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": {
            "name": f"fuzz-{uuid.uuid4().hex[:8]}",
            "namespace": twin,
            "labels": names.peer_labels(consumer_id),
        },
        "spec": {"pod": pod, "homePodUID": str(uuid.uuid4())},
    }


@FUZZ
@given(pod=mutated(api_pods().map(lambda p: p["spec"]), POD_FIELDS) | json_values)
async def test_any_shadow_pod_gets_a_verdict_never_an_error(
    sites: dict[str, Site], rome_on_milan: Offloaded, as_rome: KubeClient, milan: KubeClient, pod: Any
) -> None:
    manager = await manager_restarts(sites["milan"])
    body = shadow_pod(rome_on_milan.twin, sites["rome"].cluster_id, pod)
    answer = await outcome(as_rome.create(SHADOW_PODS, body, dry_run=True))
    if isinstance(answer, ApiError):
        assert answer.status in (400, 403, 422), str(answer)
    stored, _ = await milan.list_all(SHADOW_PODS, namespace=rome_on_milan.twin)
    assert body["metadata"]["name"] not in {s["metadata"]["name"] for s in stored}
    assert await manager_restarts(sites["milan"]) == manager


NAMESPACE_NAMES = st.sampled_from(["com", "cert-manager", "kube-system", "liqo", "default", "monitoring", "google"])
NAMES = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z") | NAMESPACE_NAMES
"""Namespace names: what passes the map's schema and reaches milan's controller."""


@st.composite
def map_entries(draw: st.DrawFn) -> list[tuple[str, bool | None, str]]:
    """Per home namespace: take the name milan gives (True), one of the peer's choosing (False), or its own (None)."""
    homes = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    return [(home, draw(st.booleans() | st.none()), draw(NAMES)) for home in homes]


@FUZZ
@given(mappings=st.dictionaries(NAMES | st.text(max_size=70), NAMES | json_values, max_size=4) | json_values)
async def test_a_namespace_map_of_any_shape_is_stored_or_refused_never_an_error(
    sites: dict[str, Site], rome_on_milan: Offloaded, as_rome: KubeClient, mappings: Any
) -> None:
    rome_id = sites["rome"].cluster_id
    change = [{"op": "replace", "path": "/spec/mappings", "value": mappings}]
    patched = await outcome(
        as_rome.patch(
            NAMESPACE_MAPS,
            rome_id,
            change,
            namespace=names.tenant_namespace(rome_id),
            patch_type="json",
            dry_run=True,
        )
    )
    if isinstance(patched, ApiError):
        assert 400 <= patched.status < 500, str(patched)


@WRITES
@given(entries=map_entries())
async def test_any_namespace_map_yields_only_the_twins_milan_gives(
    sites: dict[str, Site],
    rome_on_milan: Offloaded,
    as_rome: KubeClient,
    milan: KubeClient,
    entries: list[tuple[str, bool | None, str]],
) -> None:
    rome_id = sites["rome"].cluster_id
    tenant = names.tenant_namespace(rome_id)
    # Per home: the name milan gives, one of the peer's choosing, or (None) a namespace name anyway.
    mappings = {
        home: names.twin_namespace(home, home_cluster_id=rome_id) if pick else (chosen if pick is False else home)
        for home, pick, chosen in entries
    }
    manager = await manager_restarts(sites["milan"])
    current = await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant)

    async def replace(value: dict[str, str]) -> Obj:
        change = [{"op": "replace", "path": "/spec/mappings", "value": value}]
        return await as_rome.patch(NAMESPACE_MAPS, rome_id, change, namespace=tenant, patch_type="json")

    refused = await outcome(replace(mappings))
    if isinstance(refused, ApiError):
        assert 400 <= refused.status < 500, str(refused)
        return
    try:

        async def settled() -> bool:
            status = ((await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant)).get("status") or {}).get(
                "mappings"
            ) or {}
            return all(status.get(home, {}).get("phase") in ("Ready", "Conflict") for home in mappings)

        await eventually(settled, timeout=60, message=f"milan answers the map {mappings}")
        selector = f"{names.REMOTE_CLUSTER_ID}={rome_id},{names.ORIGIN_NAMESPACE}"
        twins, _ = await milan.list_all(NAMESPACES, label_selector=selector)
        for twin in twins:
            home = twin["metadata"]["labels"][names.ORIGIN_NAMESPACE]
            assert twin["metadata"]["name"] == names.twin_namespace(home, home_cluster_id=rome_id), twin["metadata"]
    finally:
        await replace(current["spec"]["mappings"])
    assert await manager_restarts(sites["milan"]) == manager


MILAN_POD_CIDR = ipaddress.ip_network("10.245.0.0/16")
"""milan's pod CIDR (conftest's ``sites``)."""
WORD_FIELDS = ["clusterID", "podCIDR", "remappedPodCIDR", "gateway", "role", "publicKey", "endpoint", "address", "port"]


@WRITES
@given(spec=mutated(st.just({"clusterID": "x", "podCIDR": "10.80.0.0/16", "gateway": {"role": "client"}}), WORD_FIELDS))
async def test_any_network_word_of_the_peer_is_refused_or_read_never_an_error(
    sites: dict[str, Site], rome_on_milan: Offloaded, as_rome: KubeClient, milan: KubeClient, spec: Any
) -> None:
    rome_id = sites["rome"].cluster_id
    tenant = names.tenant_namespace(rome_id)
    if spec.get("clusterID") == "x":
        spec["clusterID"] = rome_id
    body = {
        "apiVersion": NETWORK_CONFIGS.api_version,
        "kind": NETWORK_CONFIGS.kind,
        "metadata": {"name": rome_id, "namespace": tenant},
        "spec": spec,
    }
    manager = await manager_restarts(sites["milan"])
    admitted = await outcome(as_rome.create(NETWORK_CONFIGS, body, dry_run=True))
    if isinstance(admitted, ApiError):
        assert 400 <= admitted.status < 500, str(admitted)
    else:
        # What milan's gateway does with a word the API server let through: read it, or refuse it by name.
        with contextlib.suppress(InvalidWord):
            check_peer_word(read_word(admitted), peer_id=rome_id, our_pod_cidr=MILAN_POD_CIDR)
    assert await manager_restarts(sites["milan"]) == manager
