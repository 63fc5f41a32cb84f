"""One ForeignCluster per peer: what a writer of a peer's record does, from what it read (liqo.peering.records)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.peering.records import CLAIM, Existing, Make, Unnamed, Wait, claim_of, decide

PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
OTHER = "0f0e0d0c-0b0a-4909-8807-060504030201"
CANDIDATES = names.foreign_cluster_names(cluster_id=PEER, cluster_name="rome")
NAMES = st.sampled_from([*CANDIDATES, "by-admin", "milan"])


def record(name: str, peer: str = PEER, *, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"clusterID": peer}}


def tenant(claimed: str | None = None, *, deleting: bool = False) -> Obj:
    meta: Obj = {"name": names.tenant_namespace(PEER), "resourceVersion": "3"}
    if claimed is not None:
        meta["annotations"] = {CLAIM: claimed}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta}


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[Obj], Obj | None]:
    """Other peers' records under any names, maybe records of ours, a tenant namespace claiming any name or none."""
    others = [record(name, OTHER) for name in draw(st.sets(NAMES, max_size=4))]
    ours = [record(name, deleting=draw(st.booleans())) for name in draw(st.sets(NAMES, max_size=2))]
    taken = {r["metadata"]["name"] for r in others}
    ours = [r for r in ours if r["metadata"]["name"] not in taken]  # names are unique
    namespace = draw(st.one_of(st.none(), st.builds(tenant, st.one_of(st.none(), NAMES), deleting=st.booleans())))
    return draw(st.permutations(others + ours)), namespace


@given(situations())
def test_a_writer_never_makes_a_second_record_nor_takes_another_peers_name(
    situation: tuple[list[Obj], Obj | None],
) -> None:
    foreign_clusters, namespace = situation
    decision = decide(peer_id=PEER, foreign_clusters=foreign_clusters, tenant=namespace, candidates=CANDIDATES)
    ours = sorted((r for r in foreign_clusters if r["spec"]["clusterID"] == PEER), key=lambda r: r["metadata"]["name"])
    taken = {r["metadata"]["name"] for r in foreign_clusters}
    if ours:  # one there: used, or waited for while it is deleted; never a second one beside it
        expected = Wait if ours[0]["metadata"].get("deletionTimestamp") else Existing
        assert isinstance(decision, expected)
        if isinstance(decision, Existing):
            assert decision.foreign_cluster == ours[0]
    elif namespace is None or namespace["metadata"].get("deletionTimestamp"):
        assert isinstance(decision, Wait)
    elif isinstance(decision, Make):
        assert decision.name not in taken
        claimed = claim_of(namespace)
        if claimed is not None and claimed not in taken:  # the other writer's claim stands
            assert decision == Make(claimed, claim=False)
        else:
            assert decision == Make(next(n for n in CANDIDATES if n not in taken), claim=True)
    else:
        assert isinstance(decision, Unnamed)
        assert set(CANDIDATES) <= taken


def test_the_reasons_say_what_is_being_deleted_and_what_is_taken() -> None:
    namespace = names.tenant_namespace(PEER)
    dying = decide(peer_id=PEER, foreign_clusters=[record("rome", deleting=True)], tenant=tenant(), candidates=["x"])
    assert dying == Wait(f"ForeignCluster rome of {PEER} is being deleted (an unpeer finishing): retry once it is gone")
    gone = decide(peer_id=PEER, foreign_clusters=[], tenant=tenant(deleting=True), candidates=["x"])
    assert gone == Wait(f"namespace {namespace} is being deleted (an unpeer finishing): retry once it is gone")
    taken = decide(peer_id=PEER, foreign_clusters=[record("x", OTHER)], tenant=tenant(), candidates=["x"])
    assert taken == Unnamed(f"every name for a ForeignCluster of {PEER} is taken: x")


def test_a_claim_that_is_no_string_is_no_claim() -> None:
    assert claim_of({"metadata": {"annotations": {CLAIM: ""}}}) is None
    assert claim_of({"metadata": {}}) is None
    assert claim_of(tenant("by-admin")) == "by-admin"
