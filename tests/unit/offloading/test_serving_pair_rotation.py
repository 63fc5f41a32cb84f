"""Every manager replica follows the shared serving pair as it rotates: a new pair is served and its CA published."""

from __future__ import annotations

from typing import cast

import pytest

from liqo.api import names
from liqo.api.components import AUTH_SERVICE, WEBHOOK_SERVICE
from liqo.kube.client import KubeClient
from liqo.kube.resources import SECRETS
from liqo.offloading import registration
from tests.unit.fakeapi import FakeApi


class Stop(Exception):
    """Ends the follow loop after the reads a test wants."""


async def test_a_rotated_pair_is_installed_once_and_an_unchanged_one_never() -> None:
    api = FakeApi()
    client = cast(KubeClient, api)
    first = await registration.manager_serving_pair(client)
    served = [
        *registration.service_dns_names(service=WEBHOOK_SERVICE, namespace=names.LIQO_NAMESPACE),
        *registration.service_dns_names(service=AUTH_SERVICE, namespace=names.LIQO_NAMESPACE),
    ]
    rotated = registration.new_pair(dns_names=served, previous=first)
    installed: list[tuple[str, str]] = []
    naps = 0

    async def nap(_seconds: float) -> None:
        nonlocal naps
        naps += 1
        if naps == 2:  # another replica renewed the pair between the first and the second read
            api.put(SECRETS, registration.serving_secret(rotated, namespace=names.LIQO_NAMESPACE, labels={}))
        if naps == 4:
            raise Stop

    with pytest.raises(Stop):
        await registration.follow_manager_serving_pair(client, first, install=installed.append, sleep=nap)
    assert installed == [(rotated.cert, rotated.key)]  # the first read found the same pair, the third too
