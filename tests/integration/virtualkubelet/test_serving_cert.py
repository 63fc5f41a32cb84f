"""The virtual kubelet's serving certificate, signed by the cluster, as the API server sees it.

Everything runs with the virtual kubelet's own identity: user ``liqo-virtual-kubelet`` (a client certificate
of the cluster CA), bound like its ServiceAccount to exactly the rights ``liqoctl install`` grants it. The
local cluster's API server verifies kubelets with the cluster CA (``--kubelet-certificate-authority``) and
its kube-controller-manager signs with that CA. The API server's verdict is taken for real: a Node whose
InternalIP is 127.0.0.1 and whose kubelet port is a listener serving the pair, a pod bound to it, and that
pod's ``pods/log``, which the API server fetches from the listener. The listener closes every connection
after one answer, so each request is a fresh TLS handshake the API server verifies.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from liqo.api import names
from liqo.api.components import VIRTUAL_KUBELET
from liqo.install.installer import BY_KIND
from liqo.install.manifests import (
    component_rbac,
    namespace,
    own_approvals_policy,
    virtual_kubelet_rules,
)
from liqo.kube import csr, kubeconfig, pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.resources import CSRS, NODES, PODS
from liqo.localclusters import clusters
from tests.integration.helpers import LocalCluster, unique
from tests.shared import eventually

TTL = csr.MIN_EXPIRATION_SECONDS
"""The shortest lifetime the API server accepts: renewal is driven by an injected schedule, not by waiting."""


async def virtual_kubelet_may_approve(kube: KubeClient) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": VIRTUAL_KUBELET,
            "resourceAttributes": {
                "verb": "approve",
                "group": "certificates.k8s.io",
                "resource": "signers",
                "name": csr.KUBELET_SERVING_SIGNER,
            },
        },
    }
    answer = await kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


@pytest.fixture
async def as_virtual_kubelet(cluster: LocalCluster, kube: KubeClient, tmp_path: Path) -> AsyncIterator[KubeClient]:
    """The cluster as the virtual kubelet's user, with the rights install gives it (applied here)."""
    for item in [namespace(), *component_rbac(VIRTUAL_KUBELET, virtual_kubelet_rules()), *own_approvals_policy()]:
        await kube.apply(BY_KIND[item["kind"]], item)
    await eventually(
        lambda: virtual_kubelet_may_approve(kube), timeout=30, message="the virtual kubelet's RBAC is in force"
    )
    path = tmp_path / "virtual-kubelet.kubeconfig"
    await asyncio.to_thread(clusters.issue_client_kubeconfig, cluster.name, user=VIRTUAL_KUBELET, path=path)
    async with KubeClient.from_kubeconfig(path, name="virtual-kubelet") as client:
        yield client


@pytest.fixture
def labels() -> dict[str, str]:
    """Labels marking this test's requests (the virtual kubelet's own label, and the test's)."""
    return {names.MANAGED_BY: names.MANAGED_BY_VALUE, "test": unique("vkcert")}


def obtain_for(client: KubeClient, labels: dict[str, str]) -> Callable[[], Awaitable[csr.CertifiedKey]]:
    """What the virtual kubelet calls to get (and renew) its pair, for the address 127.0.0.1."""
    return partial(
        csr.issue_kubelet_serving,
        csr.CsrIssuer(client=client),
        node_name=VIRTUAL_KUBELET,
        ip_addresses=["127.0.0.1"],
        expiration_seconds=TTL,
        generate_name=f"{VIRTUAL_KUBELET}-",
        labels=labels,
    )


async def requests_labelled(kube: KubeClient, labels: dict[str, str]) -> list[dict[str, Any]]:
    items, _ = await kube.list_all(CSRS, label_selector=f"test={labels['test']}")
    return items


@dataclass(frozen=True)
class Kubelet:
    """A kubelet API listener serving whatever pair its context holds, and the Node and pod that lead to it."""

    context: ssl.SSLContext
    port: int
    pod: str
    namespace: str

    async def logs_through_the_api_server(self, kube: KubeClient) -> str:
        """``pods/log`` of the pod bound to the Node: the API server dials the listener and verifies it."""
        raw = await kube.request_bytes("GET", PODS.path(namespace=self.namespace, name=self.pod, subresource="log"))
        return raw.decode()

    async def served_serial(self, ca: bytes) -> int:
        """The serial number of the certificate the listener shows a new connection verifying ``ca`` and the IP."""
        client = ssl.create_default_context(cadata=ca.decode())
        _, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=client, server_hostname="127.0.0.1")
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            return int(x509.load_der_x509_certificate(der).serial_number)
        finally:
            writer.close()


@pytest.fixture
async def kubelet(kube: KubeClient, namespace: str) -> AsyncIterator[Kubelet]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)

    async def logs(request: web.Request) -> web.Response:
        # One answer per connection: the API server's next request is a new handshake, verified afresh.
        return web.Response(text=f"logs of {request.match_info['pod']}\n", headers={"Connection": "close"})

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    port = runner.addresses[0][1]
    node = unique("vkcert")
    await kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {"taints": [{"key": "vkcert", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            },
        },
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}]},
    }

    async def created() -> bool:
        try:
            await kube.create(PODS, pod)
        except ApiError as exc:
            if "serviceaccount" not in exc.message:
                raise
            return False  # the namespace's default ServiceAccount is not there yet
        return True

    try:
        await eventually(created, timeout=30, message="a pod bound to the test Node")
        yield Kubelet(context=context, port=port, pod="app", namespace=namespace)
    finally:
        await kube.delete(NODES, node)
        await runner.cleanup()


def ca_of(cluster: LocalCluster) -> bytes:
    return (cluster.dir.pki / "ca.crt").read_bytes()


async def test_the_virtual_kubelet_gets_a_certificate_of_its_address_that_the_api_server_accepts(
    cluster: LocalCluster, kube: KubeClient, as_virtual_kubelet: KubeClient, labels: dict[str, str], kubelet: Kubelet
) -> None:
    certified = await obtain_for(as_virtual_kubelet, labels)()

    cert = x509.load_pem_x509_certificate(certified.cert.encode())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_of(cluster)))
    assert cert.subject.rfc4514_string() == f"CN=system:node:{VIRTUAL_KUBELET},O=system:nodes"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == []
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    # Short-lived: what was asked (the signer backdates the start by a few minutes).
    left = certified.not_after - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(seconds=TTL - 60) < left <= datetime.timedelta(seconds=TTL + 5)
    assert await requests_labelled(kube, labels) == []  # the request is deleted once read

    certified.load_into(kubelet.context)
    assert await kubelet.logs_through_the_api_server(kube) == "logs of app\n"
    # What the virtual kubelet served before, as a pod: a self-signed pair, which the API server refuses.
    self_signed = pki.issue(pki.make_ca("liqo-kubelet-ca"), common_name="vk", ip_addresses=["127.0.0.1"], server=True)
    kubeconfig.load_cert_chain(kubelet.context, self_signed.cert.decode(), self_signed.key.decode())
    with pytest.raises(ApiError, match="certificate signed by unknown authority"):
        await kubelet.logs_through_the_api_server(kube)


async def test_renewal_swaps_the_certificate_a_live_listener_serves(
    cluster: LocalCluster, kube: KubeClient, as_virtual_kubelet: KubeClient, labels: dict[str, str], kubelet: Kubelet
) -> None:
    obtain = obtain_for(as_virtual_kubelet, labels)
    first = await obtain()
    first.load_into(kubelet.context)
    before = await kubelet.served_serial(ca_of(cluster))
    assert before == x509.load_pem_x509_certificate(first.cert.encode()).serial_number
    assert await kubelet.logs_through_the_api_server(kube) == "logs of app\n"

    due: list[datetime.datetime] = []
    served: list[csr.CertifiedKey] = []
    renewed = asyncio.Event()

    async def schedule(seconds: float) -> None:
        """The first renewal comes at once (as if its time had come); the next one never, in this test."""
        due.append(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds))
        if len(due) > 1:
            await asyncio.Event().wait()

    def install(certified: csr.CertifiedKey) -> None:
        certified.load_into(kubelet.context)
        served.append(certified)
        renewed.set()

    renewal = asyncio.create_task(csr.keep_renewed(obtain, current=first, install=install, sleep=schedule))
    try:
        async with asyncio.timeout(60):
            await renewed.wait()
    finally:
        renewal.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewal
    # It was due between a little more than half and two thirds of the first pair's lifetime.
    earliest = csr.renewal_time(not_before=first.not_before, not_after=first.not_after, draw=1)
    latest = csr.renewal_time(not_before=first.not_before, not_after=first.not_after)
    slack = datetime.timedelta(seconds=1)
    assert earliest - slack <= due[0] <= latest + slack

    after = await kubelet.served_serial(ca_of(cluster))
    assert after == x509.load_pem_x509_certificate(served[0].cert.encode()).serial_number != before
    assert await kubelet.logs_through_the_api_server(kube) == "logs of app\n"
    assert await requests_labelled(kube, labels) == []


class Mistaken(csr.CsrIssuer):
    """An issuer wrong about who it is: the request it makes is then, to it, someone else's."""

    async def username(self) -> str:
        return "someone-else"


async def test_the_virtual_kubelet_approves_its_own_request_and_nothing_else(
    kube: KubeClient, as_virtual_kubelet: KubeClient, labels: dict[str, str]
) -> None:
    # Someone else's pending request, made to look like ours (same name prefix, same labels).
    _, request = csr.kubelet_serving_request(node_name=VIRTUAL_KUBELET, ip_addresses=["10.0.0.9"])
    lookalike = await kube.create(
        CSRS,
        csr.csr_object(
            csr_pem=request,
            signer=csr.KUBELET_SERVING_SIGNER,
            usages=csr.KUBELET_SERVING_USAGES,
            expiration_seconds=TTL,
            generate_name=f"{VIRTUAL_KUBELET}-",
            labels=labels,
        ),
    )
    try:
        await obtain_for(as_virtual_kubelet, labels)()
        left = await requests_labelled(kube, labels)
        assert [item["metadata"]["name"] for item in left] == [lookalike["metadata"]["name"]]
        assert (left[0].get("status") or {}).get("conditions") is None  # neither approved nor signed

        # The requester is the API server's record, read from the stored request: one recorded as anyone
        # but ourselves is deleted unapproved.
        with pytest.raises(csr.SigningError, match=f"requested by '{VIRTUAL_KUBELET}', not by us"):
            await csr.issue_kubelet_serving(
                Mistaken(client=as_virtual_kubelet),
                node_name=VIRTUAL_KUBELET,
                ip_addresses=["127.0.0.1"],
                expiration_seconds=TTL,
                generate_name=f"{VIRTUAL_KUBELET}-",
                labels=labels,
            )
        assert [item["metadata"]["name"] for item in await requests_labelled(kube, labels)] == [
            lookalike["metadata"]["name"]
        ]
    finally:
        await kube.delete(CSRS, lookalike["metadata"]["name"])


@dataclass(frozen=True)
class Ask:
    """A request someone else makes for another signer."""

    signer: str
    common_name: str
    organizations: tuple[str, ...] = ()


async def admins_request(
    kube: KubeClient, request: str, *, signer: str, usages: tuple[str, ...] | list[str], labels: dict[str, str]
) -> dict[str, Any]:
    """A certificate request made by the admin (someone other than the virtual kubelet)."""
    return await kube.create(
        CSRS,
        csr.csr_object(
            csr_pem=request,
            signer=signer,
            usages=usages,
            expiration_seconds=TTL,
            generate_name="someone-elses-",
            labels=labels,
        ),
    )


@pytest.mark.parametrize(
    "ask",
    [
        # A client certificate for a control-plane user (system:masters alone is refused at creation).
        Ask(csr.CLIENT_SIGNER, "system:kube-controller-manager"),
        Ask("kubernetes.io/kube-apiserver-client-kubelet", "system:node:any", ("system:nodes",)),
    ],
    ids=lambda ask: ask.signer,
)
async def test_rbac_refuses_the_virtual_kubelets_approval_for_any_other_signer(
    kube: KubeClient, as_virtual_kubelet: KubeClient, labels: dict[str, str], ask: Ask
) -> None:
    _, request = csr.make_request(common_name=ask.common_name, organizations=ask.organizations)
    theirs = await admins_request(kube, request, signer=ask.signer, usages=csr.CLIENT_USAGES, labels=labels)
    name = theirs["metadata"]["name"]
    try:
        # Unconditional (no resourceVersion): kube-controller-manager may be approving and signing a kubelet
        # client request of the admin's meanwhile (its own approver trusts the admin), and a conditional
        # approval would then be a conflict rather than a refusal.
        unconditional = theirs | {"metadata": {"name": name}}
        attack = csr.approved(unconditional, reason="Attack", message="not ours")
        with pytest.raises(ApiError) as refused:
            await as_virtual_kubelet.replace(CSRS, attack, subresource="approval")
        assert refused.value.status == 403
        assert ask.signer in refused.value.message
        conditions = ((await kube.get(CSRS, name)).get("status") or {}).get("conditions") or []
        assert "Attack" not in [condition.get("reason") for condition in conditions]
    finally:
        await kube.delete(CSRS, name)


async def test_the_api_server_refuses_the_virtual_kubelet_anyone_elses_kubelet_serving_request(
    kube: KubeClient, as_virtual_kubelet: KubeClient, labels: dict[str, str]
) -> None:
    """RBAC grants approval per signer, not per requester; the policy ``liqo-own-approvals`` closes the gap.

    Someone else — any user who may create CSRs — asks for a serving certificate of a real node's name and
    address. RBAC alone lets the virtual kubelet's identity approve it (the SubjectAccessReview says so), and
    kube-controller-manager would sign it; the API server refuses the approval, naming the rule, and the
    request stays pending. Nor may the identity list requests to go looking for them.
    """
    node = (await kube.list_all(NODES))[0][0]
    address = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    _, request = csr.kubelet_serving_request(node_name=node["metadata"]["name"], ip_addresses=[address])
    theirs = await admins_request(
        kube, request, signer=csr.KUBELET_SERVING_SIGNER, usages=csr.KUBELET_SERVING_USAGES, labels=labels
    )
    name = theirs["metadata"]["name"]
    try:
        assert theirs["spec"]["username"] != VIRTUAL_KUBELET
        with pytest.raises(ApiError) as refused:
            await as_virtual_kubelet.list(CSRS)
        assert refused.value.status == 403
        assert await virtual_kubelet_may_approve(kube)  # RBAC would let it
        attack = csr.approved(theirs, reason="Attack", message="not ours")

        async def policy_in_force() -> bool:
            # A policy just created takes a moment to reach the API server's admission: try without effect.
            try:
                await as_virtual_kubelet.replace(CSRS, attack, subresource="approval", dry_run=True)
            except ApiError:
                return True
            return False

        await eventually(policy_in_force, timeout=30, message="the policy liqo-own-approvals is in force")
        with pytest.raises(ApiError) as denied:
            await as_virtual_kubelet.replace(CSRS, attack, subresource="approval")
        assert "may approve only the certificate requests they made themselves" in str(denied.value)
        assert not ((await kube.get(CSRS, name)).get("status") or {}).get("conditions")
    finally:
        with contextlib.suppress(NotFoundError):
            await kube.delete(CSRS, name)
