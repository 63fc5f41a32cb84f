"""A peer's Secret never becomes one of the provider's API clients (docs/security.md, "Identities").

rome consumes from milan and offloads a namespace there, so rome's identity on milan writes Secrets in that
twin: any name, any labels, liqo's included. With that identity alone, rome writes Secrets shaped like the
identities milan's components follow (``liqo-identity``, labelled ``liqo.io/identity``), each holding a
kubeconfig that acts: an exec plugin whose command would run inside milan's manager and virtual kubelet (host
processes on these local clusters, so on this machine, as root), and a token file with a server of rome's,
which would receive what milan's process reads from that file (its ServiceAccount token, in a pod).
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from liqo.api import names
from liqo.api.peers import IDENTITY_LABEL
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, SECRETS
from liqo.peering import operations
from tests.integration.helpers import Offloaded, Site
from tests.shared import eventually


@contextlib.asynccontextmanager
async def listener(hits: list[str]) -> AsyncIterator[str]:
    """A server of rome's: the URL it answers at; every request's Authorization header lands in ``hits``."""

    async def record(request: web.Request) -> web.Response:
        hits.append(request.headers.get("Authorization", ""))
        return web.json_response({"kind": "Status", "code": 403}, status=403)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def acting_identity(*, namespace: str, name: str, server: str, user: dict[str, Any]) -> Obj:
    """A Secret shaped like an identity liqo writes, whose kubeconfig makes its reader act."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": names.peer_labels(str(uuid.uuid4())) | {IDENTITY_LABEL: "true"},
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(orjson.dumps(kubeconfig)).decode()},
    }


async def refusals(milan: KubeClient, twin: str) -> list[Obj]:
    events, _ = await milan.list_all(
        EVENTS, namespace=twin, field_selector=f"involvedObject.name={names.IDENTITY_SECRET},reason=UntrustedIdentity"
    )
    return events


@pytest.mark.timeout(300)
async def test_a_peers_identity_look_alike_runs_nothing_and_reaches_no_one(
    sites: dict[str, Site], offloaded: Offloaded, rome: KubeClient, milan: KubeClient, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    credential = tmp_path / "credential"
    credential.write_text("stands-for-milans-serviceaccount-token")
    credential_plugin = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "status": {"token": "t"}})
    hits: list[str] = []
    milan_id = sites["milan"].cluster_id
    async with (
        listener(hits) as rome_server,
        KubeClient.from_kubeconfig_dict(await operations.peer_kubeconfig(rome, milan_id)) as as_rome,
    ):
        # Where liqo keeps identities, rome cannot write at all.
        with pytest.raises(ApiError) as refused:
            await as_rome.create(
                SECRETS,
                acting_identity(
                    namespace=names.tenant_namespace(sites["rome"].cluster_id),
                    name=names.IDENTITY_SECRET,
                    server=rome_server,
                    user={"tokenFile": str(credential)},
                ),
            )
        assert refused.value.status == 403
        # In its twin it can, under any name: one named like an identity, one not.
        written = [
            acting_identity(
                namespace=offloaded.twin,
                name="rome-credentials",
                server=rome_server,
                user={"tokenFile": str(credential)},
            ),
            acting_identity(
                namespace=offloaded.twin,
                name=names.IDENTITY_SECRET,
                server=rome_server,
                user={"exec": {"command": "/bin/sh", "args": ["-c", f"touch {ran}; echo '{credential_plugin}'"]}},
            ),
        ]
        try:
            for secret in written:
                await as_rome.create(SECRETS, secret)

            async def answered() -> bool:
                return bool(ran.exists() or hits or await refusals(milan, offloaded.twin))

            await eventually(answered, timeout=60, message="milan's manager refuses the look-alike with an Event")
            assert not ran.exists(), "milan's manager ran the command of rome's Secret"
            assert hits == [], f"milan sent {hits} to rome's server"
            [event] = await refusals(milan, offloaded.twin)
            assert event["type"] == "Warning"
            assert "only read from Secret liqo-identity in a provider's tenant namespace" in event["message"]
        finally:
            for secret in written:
                with contextlib.suppress(NotFoundError):
                    await as_rome.delete(SECRETS, secret["metadata"]["name"], namespace=offloaded.twin)
    assert not ran.exists()
    assert hits == []
