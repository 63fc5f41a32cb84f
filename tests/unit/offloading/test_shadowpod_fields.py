"""The ShadowPod controller's pod cache keeps every field the controller reads of its pods."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.kube.projection import strip_bookkeeping
from liqo.kube.resources import terminating
from liqo.offloading.budget import UnreadablePod, pod_usage
from liqo.offloading.shadowpods import POD_FIELDS, _owner_uid, _terminal, grace_period, made_for
from tests.shared import api_pods


def _usage(pod: Obj) -> object:
    try:
        return pod_usage(pod["spec"])
    except UnreadablePod as exc:
        return str(exc)


@given(pod=api_pods(), uid=st.sampled_from(["s1", "s2"]), grace=st.sampled_from([None, "5", "500", "x"]))
def test_the_controller_answers_the_same_on_a_projected_pod(pod: Obj, uid: str, grace: str | None) -> None:
    small = POD_FIELDS(pod)
    assert POD_FIELDS(small) == small
    shadow: Obj = {"metadata": {"uid": uid, "annotations": {} if grace is None else {names.GRACE_PERIOD: grace}}}
    assert made_for(small, shadow) == made_for(pod, shadow)
    assert grace_period(shadow, small) == grace_period(shadow, pod)
    assert _terminal(small) == _terminal(pod)
    assert _owner_uid(small) == _owner_uid(pod)
    assert terminating(small) == terminating(pod)
    assert _usage(small) == _usage(pod)
    assert small["metadata"] == strip_bookkeeping(pod)["metadata"]  # keys, deletion preconditions
    assert not {"volumes", "tolerations"} & set(small["spec"])
