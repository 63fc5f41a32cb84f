"""The remote pod cache keeps every field the reflectors read of a remote pod: same answers either way."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.kube.projection import strip_bookkeeping
from liqo.virtualkubelet.forge import pods as forge
from liqo.virtualkubelet.reflection.manager import REMOTE_POD_FIELDS
from tests.shared import api_pods


@given(remote=api_pods(), home_uid=st.sampled_from(["h1", "h2"]))
def test_the_reflectors_answer_the_same_on_a_projected_remote_pod(remote: Obj, home_uid: str) -> None:
    remote["metadata"]["annotations"] = {names.HOME_POD_UID: "h1"}
    small = REMOTE_POD_FIELDS(remote)
    assert REMOTE_POD_FIELDS(small) == small
    home = {"metadata": {"uid": home_uid}}
    assert forge.runs_home_pod(small, home) == forge.runs_home_pod(remote, home)
    assert forge.home_status(small, node_address="10.0.0.1") == forge.home_status(remote, node_address="10.0.0.1")
    assert small["metadata"] == strip_bookkeeping(remote)["metadata"]  # the Events reflector's UID check
    assert "spec" not in small
